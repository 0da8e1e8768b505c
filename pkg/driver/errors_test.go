package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/topology"
)

func TestCodeFor(t *testing.T) {
	wrap := func(kinds ...error) error { return fmt.Errorf("op: %w", &cloud.Error{Op: "X", Kinds: kinds}) }
	cases := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"status kept", status.Error(codes.OutOfRange, "x"), codes.OutOfRange},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
		{"not found", wrap(cloud.ErrNotFound), codes.NotFound},
		{"already exists", wrap(cloud.ErrAlreadyExists), codes.AlreadyExists},
		{"idempotency mismatch", wrap(cloud.ErrIdempotentParameterMismatch, cloud.ErrAlreadyExists), codes.AlreadyExists},
		{"invalid argument", wrap(cloud.ErrInvalidArgument), codes.InvalidArgument},
		{"no zone", fmt.Errorf("choose: %w", topology.ErrNoZone), codes.InvalidArgument},
		{"bad parameter", invalidParam("x"), codes.InvalidArgument},
		{"limit", wrap(cloud.ErrLimitExceeded), codes.ResourceExhausted},
		{"size out of range", wrap(cloud.ErrOutOfRange), codes.OutOfRange},
		{"insufficient capacity", wrap(cloud.ErrInsufficientCapacity), codes.ResourceExhausted},
		{"zone mismatch", wrap(cloud.ErrZoneMismatch), codes.FailedPrecondition},
		{"in use", wrap(cloud.ErrInUse), codes.FailedPrecondition},
		{"incorrect state", wrap(cloud.ErrIncorrectState), codes.Aborted},
		{"throttled", wrap(cloud.ErrThrottled, cloud.ErrUnavailable), codes.Unavailable},
		{"unavailable", wrap(cloud.ErrUnavailable), codes.Unavailable},
		{"permission", wrap(cloud.ErrPermissionDenied), codes.PermissionDenied},
		{"failed in the cloud", wrap(cloud.ErrFailed), codes.Internal},
		{"instance gone", wrap(cloud.ErrInstanceGone, cloud.ErrNotFound), codes.NotFound},
		{"instance gone alone", wrap(cloud.ErrInstanceGone), codes.NotFound},
		{"attached to a stopped node", fmt.Errorf("publish: %w", &cloud.AttachedElsewhereError{VolumeID: "vol-1", InstanceID: "i-2",
			AttachmentState: cloud.AttachmentAttached, InstanceState: cloud.InstanceStopped}), codes.FailedPrecondition},
		{"attached to a terminated node", fmt.Errorf("publish: %w", &cloud.AttachedElsewhereError{VolumeID: "vol-1", InstanceID: "i-2",
			AttachmentState: cloud.AttachmentDetaching, InstanceState: cloud.InstanceTerminated}), codes.FailedPrecondition},
		{"attachment stuck", wrap(cloud.ErrAttachmentStuck), codes.Unavailable},
		{"attachment limit", &cloud.Error{Op: "AttachVolume", Code: "AttachmentLimitExceeded", Kinds: []error{cloud.ErrLimitExceeded}}, codes.ResourceExhausted},
		{"online resize refused", fmt.Errorf("grow: %w", errOnlineResizeRefused), codes.FailedPrecondition},
		{"foreign data", fmt.Errorf("stage: %w", errDeviceHasData), codes.FailedPrecondition},
		{"path in use", fmt.Errorf("publish: %w", errPathInUse), codes.AlreadyExists},
		{"not at path", fmt.Errorf("stats: %w", errVolumeNotAtPath), codes.NotFound},
		{"device missing", fmt.Errorf("stage: %w", errDeviceNotFound), codes.Internal},
		{"left mounted, whatever failed", fmt.Errorf("%w: grow: %w", errLeftMounted, errOnlineResizeRefused), codes.Aborted},
		{"left mounted, a status inside", fmt.Errorf("%w: %w", errLeftMounted, status.Error(codes.Internal, "x")), codes.Aborted},
		{"anything else", errors.New("boom"), codes.Internal},
	}
	for _, tc := range cases {
		if got := codeFor(tc.err); got != tc.want {
			t.Errorf("%s: codeFor = %s, want %s", tc.name, got, tc.want)
		}
		if tc.err != nil && status.Code(rpcError(tc.err)) != tc.want {
			t.Errorf("%s: rpcError code = %s, want %s", tc.name, status.Code(rpcError(tc.err)), tc.want)
		}
	}
	if rpcError(nil) != nil {
		t.Error("rpcError(nil) must be nil")
	}
}
