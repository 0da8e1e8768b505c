package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The sidecars that send the controller RPCs, with the --timeout deploy/kustomize/base/controller.yaml gives
// each (sidecar_test.go holds the two together) and the retry interval they start from and grow to: the
// manifests set neither --retry-interval-start nor --retry-interval-max, so external-provisioner's and
// external-attacher's defaults apply (1 s and 5 min; the interval doubles with each failure of the item).
const (
	provisioner = "csi-provisioner"
	attacher    = "csi-attacher"

	provisionerTimeout = 60 * time.Second
	attacherTimeout    = 60 * time.Second
	retryIntervalStart = time.Second
	retryIntervalMax   = 5 * time.Minute
)

// sidecarOf is the sidecar that sends rpc.
func sidecarOf(rpc string) string {
	switch rpc {
	case "ControllerPublishVolume", "ControllerUnpublishVolume":
		return attacher
	default:
		return provisioner
	}
}

// timeoutOf is the deadline the sidecar puts on each call of rpc.
func timeoutOf(rpc string) time.Duration {
	if sidecarOf(rpc) == attacher {
		return attacherTimeout
	}
	return provisionerTimeout
}

// retryable are the codes a sidecar retries as an operation still in progress (the provisioner's
// isFinalError, the attacher's likewise): the RPC may yet succeed under the same name, so it is sent again.
func retryable(c codes.Code) bool {
	switch c {
	case codes.DeadlineExceeded, codes.Aborted, codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// caller sends a cycle's RPCs: each once under the cycle's deadline (the plain bench), or as the sidecars do,
// each attempt under the sidecar's --timeout, a retryable failure sent again after the sidecar's exponential
// backoff (start, doubling, up to max, no jitter: client-go's ItemExponentialFailureRateLimiter).
type caller struct {
	sidecar    bool
	start, max time.Duration
	// sleep waits d or until ctx ends; a test replaces it.
	sleep func(ctx context.Context, d time.Duration) error
}

// outcome is one RPC as the caller saw it: the error it gave up on (nil on success), how long it took from the
// first attempt to the last answer, and the codes of the attempts that were retried.
type outcome struct {
	err     error
	took    time.Duration
	retried []codes.Code
}

// call sends rpc through fn until it succeeds or fails for good.
func (c caller) call(ctx context.Context, rpc string, fn func(ctx context.Context) error) outcome {
	begin := time.Now()
	if !c.sidecar {
		err := fn(ctx)
		return outcome{err: err, took: time.Since(begin)}
	}
	var out outcome
	delay := c.start
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, timeoutOf(rpc))
		err := fn(attemptCtx)
		cancel()
		code := status.Code(err)
		if err == nil || !retryable(code) || ctx.Err() != nil {
			out.err, out.took = err, time.Since(begin)
			return out
		}
		out.retried = append(out.retried, code)
		if serr := c.sleep(ctx, delay); serr != nil {
			out.err, out.took = fmt.Errorf("gave up retrying %s (%s): %w", rpc, code, serr), time.Since(begin)
			return out
		}
		delay = min(2*delay, c.max)
	}
}
