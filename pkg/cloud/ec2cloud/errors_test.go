package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// sdkError builds an error shaped as the SDK returns EC2 errors: an OperationError around a ResponseError
// (with the HTTP status) around the GenericAPIError with the code.
func sdkError(code, message string, status int) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: "Op", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      &smithy.GenericAPIError{Code: code, Message: message},
		},
	}}
}

// TestClassifyCodes is the table of EC2 error codes to sentinels.
func TestClassifyCodes(t *testing.T) {
	var (
		notFound  = []error{cloud.ErrNotFound}
		invalid   = []error{cloud.ErrInvalidArgument}
		malformed = []error{cloud.ErrNotFound, cloud.ErrInvalidArgument}
		limit     = []error{cloud.ErrLimitExceeded}
		inUse     = []error{cloud.ErrInUse}
		state     = []error{cloud.ErrIncorrectState}
		unavail   = []error{cloud.ErrUnavailable}
		throttled = []error{cloud.ErrThrottled, cloud.ErrUnavailable}
		denied    = []error{cloud.ErrPermissionDenied}
	)
	cases := []struct {
		code   string
		status int
		want   []error
	}{
		{"InvalidVolume.NotFound", 400, notFound},
		{"InvalidSnapshot.NotFound", 400, notFound},
		{"InvalidInstanceID.NotFound", 400, notFound},
		{"InvalidAttachment.NotFound", 400, notFound},
		{"InvalidVolumeModification.NotFound", 400, notFound},
		{"InvalidSomethingNew.NotFound", 400, notFound},
		{"InvalidZone.NotFound", 400, invalid},
		{"InvalidVolumeID.Malformed", 400, malformed},
		{"InvalidSnapshotID.Malformed", 400, malformed},
		{"InvalidInstanceID.Malformed", 400, malformed},
		{"InvalidID", 400, malformed},
		{"IdempotentParameterMismatch", 400, []error{cloud.ErrIdempotentParameterMismatch, cloud.ErrAlreadyExists}},
		{"InvalidSnapshot.Duplicate", 400, []error{cloud.ErrAlreadyExists}},
		{"InvalidParameter", 400, invalid},
		{"InvalidParameterValue", 400, invalid},
		{"InvalidParameterCombination", 400, invalid},
		{"InvalidParameterDependency", 400, invalid},
		{"UnknownParameter", 400, invalid},
		{"MissingParameter", 400, invalid},
		{"UnsupportedOperation", 400, invalid},
		{"InvalidFilter", 400, invalid},
		{"InvalidPaginationToken", 400, invalid},
		{"VolumeLimitExceeded", 400, limit},
		{"AttachmentLimitExceeded", 400, limit},
		{"MaxIOPSLimitExceeded", 400, limit},
		{"SnapshotLimitExceeded", 400, limit},
		{"VolumeModificationSizeLimitExceeded", 400, limit},
		{"VolumeModificationRateExceeded", 400, limit},
		{"InvalidVolume.ZoneMismatch", 400, []error{cloud.ErrZoneMismatch}},
		{"VolumeInUse", 400, inUse},
		{"InvalidSnapshot.InUse", 400, inUse},
		{"IncorrectState", 400, state},
		{"IncorrectModificationState", 400, state},
		{"IncorrectInstanceState", 400, state},
		{"OperationNotPermitted", 400, state},
		{"InternalError", 500, unavail},
		{"InternalFailure", 500, unavail},
		{"Unavailable", 503, unavail},
		{"ServiceUnavailable", 503, unavail},
		{"InsufficientVolumeCapacity", 500, []error{cloud.ErrInsufficientCapacity}},
		{"RequestLimitExceeded", 503, throttled},
		{"RequestLimitExceeded", 400, throttled},
		{"Throttling", 400, throttled},
		{"EC2ThrottledException", 400, throttled},
		{"AuthFailure", 401, denied},
		{"UnauthorizedOperation", 403, denied},
		{"MissingAuthenticationToken", 401, denied},
		{"SomeNewServerFault", 502, unavail},
		{"UnknownError", 500, unavail},
		{"SomeNewClientFault", 400, nil},
		{"DryRunOperation", 412, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.code, tc.status), func(t *testing.T) {
			err := classify("Op", sdkError(tc.code, "message for "+tc.code, tc.status))
			if len(tc.want) == 0 {
				var ce *cloud.Error
				if !errors.As(err, &ce) || len(ce.Kinds) != 0 {
					t.Fatalf("classify(%s) = %#v, want a cloud.Error matching no sentinel", tc.code, err)
				}
			} else {
				wantKinds(t, err, tc.want...)
			}
			if got := cloud.Code(err); got != tc.code {
				t.Errorf("Code = %q, want %q", got, tc.code)
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tc.code {
				t.Errorf("the SDK error is not reachable through Unwrap: %v", err)
			}
			if !strings.Contains(err.Error(), tc.code) || !strings.Contains(err.Error(), "message for "+tc.code) {
				t.Errorf("Error() = %q lacks the code and message", err.Error())
			}
		})
	}
}

func TestClassifyWithoutAPIError(t *testing.T) {
	if classify("Op", nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		err := classify("Op", &smithy.OperationError{ServiceID: "EC2", OperationName: "Op", Err: ctxErr})
		if !errors.Is(err, ctxErr) {
			t.Errorf("classify(%v) = %v, lost the context error", ctxErr, err)
		}
		if errors.Is(err, cloud.ErrUnavailable) {
			t.Errorf("classify(%v) = %v, a context error is not the cloud being unavailable", ctxErr, err)
		}
	}
	err := classify("Op", &smithy.OperationError{ServiceID: "EC2", OperationName: "Op", Err: errors.New("dial tcp: connection refused")})
	wantKinds(t, err, cloud.ErrUnavailable)
	if cloud.Code(err) != "" {
		t.Errorf("Code of a network error = %q, want empty", cloud.Code(err))
	}
}

// TestIsDeviceInUse covers the one classification that reads a message, because EC2 gives no code for it.
func TestIsDeviceInUse(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{sdkError("InvalidParameterValue", "Invalid value '/dev/xvdba' for unixDevice. Attachment point /dev/xvdba is already in use", 400), true},
		{sdkError("InvalidParameterValue", "Value (/dev/sdZZ) for parameter device is invalid.", 400), false},
		{sdkError("VolumeInUse", "vol-1 is already in use", 400), false},
		{errors.New("already in use"), false},
	}
	for _, tc := range cases {
		if got := isDeviceInUse(tc.err); got != tc.want {
			t.Errorf("isDeviceInUse(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestCloudErrorFormatting(t *testing.T) {
	err := newError("attach disk", cloud.ErrLimitExceeded, "no device name left on %s", "i-1")
	wantKinds(t, err, cloud.ErrLimitExceeded)
	if got := err.Error(); got != "attach disk: no device name left on i-1" {
		t.Errorf("Error() = %q", got)
	}
	wrapped := fmt.Errorf("outer: %w", err)
	if !errors.Is(wrapped, cloud.ErrLimitExceeded) {
		t.Error("a wrapped cloud.Error lost its sentinel")
	}
}
