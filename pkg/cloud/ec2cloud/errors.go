package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// EC2 error codes the implementation decides on. Classification is by code only, with one exception:
// EC2 reports a device name already taken on the instance as InvalidParameterValue, with no code of its own,
// so isDeviceInUse has to read the message.
const (
	codeVolumeNotFound          = "InvalidVolume.NotFound"
	codeAttachmentNotFound      = "InvalidAttachment.NotFound"
	codeModificationNotFound    = "InvalidVolumeModification.NotFound"
	codeInvalidParameterValue   = "InvalidParameterValue"
	codeVolumeInUse             = "VolumeInUse"
	codeIncorrectState          = "IncorrectState"
	codeIncorrectInstanceState  = "IncorrectInstanceState"
	codeIncorrectModState       = "IncorrectModificationState"
	codeIdempotentParamMismatch = "IdempotentParameterMismatch"
)

// codeKinds maps EC2 error codes to the sentinels they mean. Codes not listed fall back to suffix rules
// (".NotFound", ".Malformed", ".Duplicate") and then to the HTTP status (5xx is unavailable). It is read-only.
var codeKinds = withThrottleCodes(map[string][]error{
	// Not found. A zone that does not exist is a bad argument, not a missing resource.
	"InvalidVolume.NotFound":             {cloud.ErrNotFound},
	"InvalidSnapshot.NotFound":           {cloud.ErrNotFound},
	"InvalidInstanceID.NotFound":         {cloud.ErrNotFound},
	"InvalidAttachment.NotFound":         {cloud.ErrNotFound},
	"InvalidVolumeModification.NotFound": {cloud.ErrNotFound},
	"InvalidZone.NotFound":               {cloud.ErrInvalidArgument},
	// A malformed ID names nothing, and is a bad argument: callers pick the reading they need.
	"InvalidID": {cloud.ErrNotFound, cloud.ErrInvalidArgument},

	codeIdempotentParamMismatch: {cloud.ErrIdempotentParameterMismatch, cloud.ErrAlreadyExists},

	// Invalid arguments (the EBS CSI driver's invalidParameterErrorCodes, plus their kin).
	"InvalidParameter":            {cloud.ErrInvalidArgument},
	"InvalidParameterValue":       {cloud.ErrInvalidArgument},
	"InvalidParameterCombination": {cloud.ErrInvalidArgument},
	"InvalidParameterDependency":  {cloud.ErrInvalidArgument},
	"UnknownParameter":            {cloud.ErrInvalidArgument},
	"MissingParameter":            {cloud.ErrInvalidArgument},
	"UnsupportedOperation":        {cloud.ErrInvalidArgument},
	"InvalidFilter":               {cloud.ErrInvalidArgument},
	"InvalidPaginationToken":      {cloud.ErrInvalidArgument},
	"InvalidNextToken":            {cloud.ErrInvalidArgument},
	"ValidationError":             {cloud.ErrInvalidArgument},
	"InvalidAction":               {cloud.ErrInvalidArgument},

	// Quotas and limits.
	"VolumeLimitExceeded":                 {cloud.ErrLimitExceeded},
	"AttachmentLimitExceeded":             {cloud.ErrLimitExceeded},
	"MaxIOPSLimitExceeded":                {cloud.ErrLimitExceeded},
	"SnapshotLimitExceeded":               {cloud.ErrLimitExceeded},
	"VolumeModificationSizeLimitExceeded": {cloud.ErrLimitExceeded},
	"VolumeModificationRateExceeded":      {cloud.ErrLimitExceeded},
	"ResourceLimitExceeded":               {cloud.ErrLimitExceeded},

	// No room for the disk: not a transient fault to retry at once.
	"InsufficientVolumeCapacity": {cloud.ErrInsufficientCapacity},

	"InvalidVolume.ZoneMismatch": {cloud.ErrZoneMismatch},

	codeVolumeInUse:         {cloud.ErrInUse},
	"InvalidSnapshot.InUse": {cloud.ErrInUse},

	codeIncorrectState:         {cloud.ErrIncorrectState},
	codeIncorrectModState:      {cloud.ErrIncorrectState},
	codeIncorrectInstanceState: {cloud.ErrIncorrectState},
	"OperationNotPermitted":    {cloud.ErrIncorrectState},

	// Transient failures on the cloud's side (throttle codes are added from the SDK's list in init).
	"InternalError":           {cloud.ErrUnavailable},
	"InternalFailure":         {cloud.ErrUnavailable},
	"Unavailable":             {cloud.ErrUnavailable},
	"ServiceUnavailable":      {cloud.ErrUnavailable},
	"RequestTimeout":          {cloud.ErrUnavailable},
	"RequestTimeoutException": {cloud.ErrUnavailable},

	// Credentials and permissions.
	"AuthFailure":                {cloud.ErrPermissionDenied},
	"UnauthorizedOperation":      {cloud.ErrPermissionDenied},
	"MissingAuthenticationToken": {cloud.ErrPermissionDenied},
	"InvalidClientTokenId":       {cloud.ErrPermissionDenied},
	"SignatureDoesNotMatch":      {cloud.ErrPermissionDenied},
	"OptInRequired":              {cloud.ErrPermissionDenied},
})

// withThrottleCodes adds the throttle codes the SDK's retryer knows (RequestLimitExceeded among them), so both
// agree on what throttling is.
func withThrottleCodes(m map[string][]error) map[string][]error {
	for code := range retry.DefaultThrottleErrorCodes {
		m[code] = []error{cloud.ErrThrottled, cloud.ErrUnavailable}
	}
	return m
}

// kindsOf gives the sentinels of an EC2 error code; status is the HTTP status (0 if unknown).
func kindsOf(code string, status int) []error {
	if k, ok := codeKinds[code]; ok {
		return k
	}
	switch {
	case strings.HasSuffix(code, ".NotFound"):
		return []error{cloud.ErrNotFound}
	case strings.HasSuffix(code, ".Malformed"):
		return []error{cloud.ErrNotFound, cloud.ErrInvalidArgument}
	case strings.HasSuffix(code, ".Duplicate"):
		return []error{cloud.ErrAlreadyExists}
	case status >= 500:
		return []error{cloud.ErrUnavailable}
	}
	return nil
}

// classify wraps an SDK error as a *cloud.Error matching the sentinels of its EC2 code. Context errors stay
// as they are (wrapped with op), so callers see context.DeadlineExceeded; anything else that never got an
// answer (network errors, exhausted retry quota) is ErrUnavailable.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.ErrorCode()
		return &cloud.Error{Op: op, Code: code, Message: apiErr.ErrorMessage(), Kinds: kindsOf(code, httpStatus(err)), Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &cloud.Error{Op: op, Kinds: []error{cloud.ErrUnavailable}, Err: err}
}

func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// errorCode is the EC2 error code in err, or "".
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// isDeviceInUse reports EC2's answer to a device name already taken on the instance. EC2 gives it no code of
// its own (it is an InvalidParameterValue), so this is the one place that reads a message.
func isDeviceInUse(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == codeInvalidParameterValue &&
		strings.Contains(apiErr.ErrorMessage(), "already in use")
}

// isTransient reports errors worth retrying later: throttling, the cloud unavailable, no answer.
func isTransient(err error) bool {
	return errors.Is(err, cloud.ErrUnavailable)
}

// newError makes a *cloud.Error of our own (not from an API answer).
func newError(op string, kind error, format string, args ...any) error {
	return &cloud.Error{Op: op, Kinds: []error{kind}, Err: fmt.Errorf(format, args...)}
}
