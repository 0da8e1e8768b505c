package driver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/topology"
)

// codeFor is the one place where errors become gRPC codes. Errors that already carry a status keep it.
func codeFor(err error) codes.Code {
	// Whatever failed, the stage left the volume mounted: kubelet (isFinalError) must not take the answer as
	// final, which it would as "not mounted", never unstaging. Aborted is one it takes as uncertain.
	if errors.Is(err, errLeftMounted) {
		return codes.Aborted
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	// The caller's deadline wins over what was being waited for.
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	// Idempotency mismatch also matches ErrAlreadyExists; both mean the name is taken by something else.
	case errors.Is(err, cloud.ErrAlreadyExists):
		return codes.AlreadyExists
	// A node that is terminated or shutting down is one that does not exist, as CSI means it.
	case errors.Is(err, cloud.ErrInstanceGone), errors.Is(err, cloud.ErrNotFound):
		return codes.NotFound
	// A group's snapshot deleted alone, or a group named with snapshots not its own: CSI's codes for both.
	case errors.Is(err, cloud.ErrInvalidArgument), errors.Is(err, topology.ErrNoZone), errors.Is(err, errInvalidParameter),
		errors.Is(err, errGroupMember), errors.Is(err, errSnapshotListMismatch):
		return codes.InvalidArgument
	case errors.Is(err, cloud.ErrOutOfRange):
		return codes.OutOfRange
	// An attach beyond the node's limit (EC2's AttachmentLimitExceeded, or no free device name) included: on
	// ResourceExhausted kubelet re-reads NodeGetInfo's limit into CSINode (MutableCSINodeAllocatableCount).
	case errors.Is(err, cloud.ErrLimitExceeded), errors.Is(err, cloud.ErrInsufficientCapacity):
		return codes.ResourceExhausted
	// ErrNotColocated is CSI's "cannot snapshot multiple volumes together".
	case errors.Is(err, cloud.ErrZoneMismatch), errors.Is(err, cloud.ErrInUse), errors.Is(err, errOnlineResizeRefused),
		errors.Is(err, cloud.ErrNotColocated),
		errors.Is(err, errDeviceHasData), errors.Is(err, errNotStaged), errors.Is(err, errStagedAsFilesystem),
		errors.Is(err, errForeignPath), errors.Is(err, errSELinuxLabels):
		return codes.FailedPrecondition
	case errors.Is(err, errPathInUse):
		return codes.AlreadyExists
	case errors.Is(err, errVolumeNotAtPath):
		return codes.NotFound
	case errors.Is(err, cloud.ErrAttachmentStuck):
		// The attachment may yet complete, and asking again detaches and attaches it anew: a transient
		// failure, and one the external-attacher does not take as final (the volume may be attached, so it
		// unpublishes before giving the volume up). Never Internal.
		return codes.Unavailable
	case errors.Is(err, cloud.ErrIncorrectState):
		// The operation may succeed once the resource settles: let the sidecar retry.
		return codes.Aborted
	case errors.Is(err, cloud.ErrThrottled), errors.Is(err, cloud.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, cloud.ErrPermissionDenied):
		return codes.PermissionDenied
	}
	// errDeviceNotFound stays Internal: the CO retries, and NotFound would claim the volume does not exist.
	return codes.Internal
}

// rpcError turns err into a gRPC status with the code codeFor gives, keeping its message.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	code := codeFor(err)
	if s, ok := status.FromError(err); ok && s.Code() == code {
		return err
	}
	return status.Error(code, err.Error())
}

// errInvalidParameter marks errors in request parameters found by the driver itself.
var errInvalidParameter = errors.New("invalid parameter")

// errLeftMounted marks a stage that failed with the volume mounted on the staging path.
var errLeftMounted = errors.New("the volume stays mounted on the staging path")

// errOnlineResizeRefused means the kernel refused to grow a mounted filesystem; the volume can grow offline.
var errOnlineResizeRefused = errors.New("the kernel refused to grow the mounted filesystem")
