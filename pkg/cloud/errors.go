package cloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sentinel errors. Errors returned by a Cloud wrap one or more of them; match with errors.Is.
var (
	// ErrNotFound: the disk, snapshot, instance or attachment does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the name is taken by a resource that is not the one asked for.
	ErrAlreadyExists = errors.New("already exists")
	// ErrIdempotentParameterMismatch: a disk was created under this name with other parameters. Errors that
	// match it also match ErrAlreadyExists.
	ErrIdempotentParameterMismatch = errors.New("idempotent parameter mismatch")
	// ErrInvalidArgument: the cloud refused a parameter (value, combination, unknown zone, malformed ID...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrOutOfRange: the size is one the disk's type does not allow (too large, or below its minimum).
	ErrOutOfRange = errors.New("size out of range")
	// ErrLimitExceeded: a quota or limit was reached (disks, attachments per instance, IOPS, snapshots).
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrInsufficientCapacity: the cloud has no room for the disk now (EC2's InsufficientVolumeCapacity). Unlike
	// ErrUnavailable it is not retried at once: the request may fit elsewhere or later.
	ErrInsufficientCapacity = errors.New("insufficient capacity")
	// ErrZoneMismatch: the disk and the instance are in different zones.
	ErrZoneMismatch = errors.New("zone mismatch")
	// ErrInUse: the disk is attached elsewhere (or, for a snapshot, in use by a disk or image).
	ErrInUse = errors.New("in use")
	// ErrIncorrectState: the resource is in a state that does not allow the operation now (a disk still
	// creating, a modification in progress); the operation may succeed later.
	ErrIncorrectState = errors.New("incorrect state")
	// ErrUnavailable: the cloud could not be reached or failed internally, or retries ran out; retry later.
	ErrUnavailable = errors.New("cloud unavailable")
	// ErrThrottled: the cloud throttled the request and retries ran out. Errors that match it also match
	// ErrUnavailable.
	ErrThrottled = errors.New("throttled")
	// ErrPermissionDenied: the credentials were refused or lack permission.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrFailed: asynchronous work failed in the cloud (a disk in error, a failed modification or snapshot).
	ErrFailed = errors.New("failed in the cloud")
	// ErrInstanceGone: the instance is shutting down or terminated, or does not exist; no disk can be attached
	// to it, and its attachments end without the caller. Errors that match it also match ErrNotFound.
	ErrInstanceGone = errors.New("instance gone")
	// ErrNotColocated: the disks of a snapshot group are not all attached to one instance (some detached, or
	// attached to different instances), so no one instant can be taken of them together.
	ErrNotColocated = errors.New("disks not attached to one instance")
	// ErrAttachmentStuck: an attachment stayed attaching past the bound, also after it was force-detached and
	// made again. The attachment may still complete; asking again later starts over.
	ErrAttachmentStuck = errors.New("attachment stuck attaching")
)

// AttachedElsewhereError is the answer to attaching a disk that is not Multi-Attach while it is attached (or
// attaching, or detaching) to another instance. It matches ErrInUse. It names that instance and its state, so
// the caller can tell a live node from a stopped or lost one, which only a detach there (or the instance's
// end) frees.
type AttachedElsewhereError struct {
	VolumeID   string
	InstanceID string
	// AttachmentState is the attachment's state on the other instance.
	AttachmentState string
	// InstanceState is the other instance's state; "" when it could not be read.
	InstanceState string
}

func (e *AttachedElsewhereError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "volume %s is attached to instance %s (attachment %s)", e.VolumeID, e.InstanceID, e.AttachmentState)
	switch {
	case e.InstanceState == "":
		b.WriteString(" (instance state unknown)")
	case IsInstanceGone(e.InstanceState):
		fmt.Fprintf(&b, ", which is %s: the cloud detaches the volume as the instance ends", e.InstanceState)
	case IsInstanceStopped(e.InstanceState):
		fmt.Fprintf(&b, ", which is %s: the volume stays attached to it until it is detached there", e.InstanceState)
	default:
		fmt.Fprintf(&b, ", which is %s", e.InstanceState)
	}
	return b.String()
}

// Is matches ErrInUse.
func (e *AttachedElsewhereError) Is(target error) bool { return target == ErrInUse }

// AttachedElsewhere is the error for a disk found attached to another instance than the one asked for (a is
// that attachment). It reads the instance's state from c for the message: one call, on this error path only.
func AttachedElsewhere(ctx context.Context, c Cloud, a Attachment) error {
	e := &AttachedElsewhereError{VolumeID: a.VolumeID, InstanceID: a.InstanceID, AttachmentState: a.State}
	if in, err := c.GetInstance(ctx, a.InstanceID); err == nil {
		e.InstanceState = in.State
	}
	return e
}

// Error is a failed cloud operation: which operation, the cloud's error code and message when there is one,
// and the sentinels it matches. It unwraps to the underlying error (an SDK error for API failures).
type Error struct {
	// Op is the operation that failed, e.g. "AttachVolume" or "create disk".
	Op string
	// Code and Message are the cloud's error code and message; empty when the failure was not an API error.
	Code    string
	Message string
	// Kinds are the sentinels the error matches.
	Kinds []error
	// Err is the underlying error.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.Code != "":
		b.WriteString(e.Code)
		if e.Message != "" {
			b.WriteString(": ")
			b.WriteString(e.Message)
		}
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	case len(e.Kinds) > 0:
		b.WriteString(e.Kinds[0].Error())
	}
	return b.String()
}

// Is matches the error's sentinels.
func (e *Error) Is(target error) bool { return slices.Contains(e.Kinds, target) }

// Unwrap gives the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Code returns the cloud's error code carried by err, or "" if there is none. It is meant for logs and
// metrics; decisions belong to errors.Is on the sentinels.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
