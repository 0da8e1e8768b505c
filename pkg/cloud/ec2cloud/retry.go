package ec2cloud

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

// Retry modes.
const (
	RetryModeAdaptive = "adaptive"
	RetryModeStandard = "standard"
)

// RetryOptions shape the SDK's retries of throttling and 5xx answers. Each mutating action (CreateVolume,
// AttachVolume...) gets a retryer of its own, with its own retry budget (token bucket), so a storm on one
// action does not starve the others. Describe calls share another. Zero fields take the defaults.
type RetryOptions struct {
	// Mode is standard (default: the pacer, pace.go, keeps calls within EC2's buckets, and a throttled attempt
	// is retried after a short backoff) or adaptive (the SDK's client-side rate limiter on top, which shrinks
	// the rate on every throttle and so slows a call down far more than random refusals call for).
	Mode string
	// MaxAttempts per mutating call, the first included. Default 10.
	MaxAttempts int
	// DescribeMaxAttempts per Describe call. Default 5. Waits poll again on their own, so these need fewer.
	DescribeMaxAttempts int
	// MaxBackoff caps the delay between attempts. Default 20s (the SDK's).
	MaxBackoff time.Duration
	// ThrottleBaseDelay is the backoff base of a throttled attempt: full jitter over base·2^(attempt-1).
	// Default 25ms: the pacer answers for EC2's buckets (the retry waits its turn there too), so a refusal it
	// did not foresee is mostly someone else's call or noise, worth another try soon (the SDK waits up to 1 s,
	// then 2 s, ...).
	ThrottleBaseDelay time.Duration
	// ThrottleMaxBackoff caps the backoff of a throttled attempt. Default 1s: waiting for EC2's bucket is the
	// pacer's part; the backoff only spreads the retries of refusals it did not foresee, and a random refusal
	// five times in a row must not cost a call several seconds.
	ThrottleMaxBackoff time.Duration
	// BaseDelay, when set, replaces the backoff for every retryable error (throttling too) with full jitter
	// over BaseDelay·2^attempt. Tests use it to keep storms short.
	BaseDelay time.Duration
	// Tokens is the retry budget of each retryer (the SDK's retry quota). Default 500, the SDK's.
	Tokens uint
}

func (o RetryOptions) withDefaults() RetryOptions {
	if o.Mode == "" {
		o.Mode = RetryModeStandard
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.DescribeMaxAttempts <= 0 {
		o.DescribeMaxAttempts = 5
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = retry.DefaultMaxBackoff
	}
	if o.ThrottleBaseDelay <= 0 {
		o.ThrottleBaseDelay = 25 * time.Millisecond
	}
	if o.ThrottleMaxBackoff <= 0 {
		o.ThrottleMaxBackoff = min(time.Second, o.MaxBackoff)
	}
	if o.Tokens == 0 {
		o.Tokens = retry.DefaultRetryRateTokens
	}
	return o
}

// retryers hands out the retryer of each mutating action, made on first use.
type retryers struct {
	opts     RetryOptions
	describe aws.Retryer

	mu       sync.Mutex
	byAction map[string]aws.Retryer
}

func newRetryers(o RetryOptions) *retryers {
	r := &retryers{opts: o, byAction: map[string]aws.Retryer{}}
	r.describe = retry.NewStandard(r.standardOptions(o.DescribeMaxAttempts))
	return r
}

func (r *retryers) standardOptions(maxAttempts int) func(*retry.StandardOptions) {
	return func(so *retry.StandardOptions) {
		so.MaxAttempts = maxAttempts
		so.MaxBackoff = r.opts.MaxBackoff
		so.RateLimiter = ratelimit.NewTokenRateLimit(r.opts.Tokens)
		so.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(notRetried)}, so.Retryables...)
		if r.opts.BaseDelay > 0 {
			so.Backoff = fullJitter{base: r.opts.BaseDelay, max: r.opts.MaxBackoff}
		} else {
			so.Backoff = throttleJitter{
				throttle: fullJitter{base: r.opts.ThrottleBaseDelay, max: r.opts.ThrottleMaxBackoff},
				other:    fullJitter{base: otherBaseDelay, max: r.opts.MaxBackoff},
			}
		}
	}
}

// answersThatStand are error codes EC2 sends with a 5xx status, which the SDK would retry, whose answer will
// not change within a call's retries: out of capacity. The driver answers at once (ResourceExhausted) and the
// orchestrator retries later.
var answersThatStand = map[string]bool{"InsufficientVolumeCapacity": true}

func notRetried(err error) aws.Ternary {
	var ae smithy.APIError
	if errors.As(err, &ae) && answersThatStand[ae.ErrorCode()] {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// forAction returns the per-call option that gives a mutating action its own retryer.
func (r *retryers) forAction(action string) func(*ec2.Options) {
	r.mu.Lock()
	rt, ok := r.byAction[action]
	if !ok {
		if r.opts.Mode == RetryModeStandard {
			rt = retry.NewStandard(r.standardOptions(r.opts.MaxAttempts))
		} else {
			rt = retry.NewAdaptiveMode(func(ao *retry.AdaptiveModeOptions) {
				ao.StandardOptions = append(ao.StandardOptions, r.standardOptions(r.opts.MaxAttempts))
			})
		}
		r.byAction[action] = rt
	}
	r.mu.Unlock()
	return func(o *ec2.Options) { o.Retryer = rt }
}

// withRetryables returns a per-call option that keeps the action's retryer but retries only the errors keep
// allows: CreateSnapshot has no idempotency token, so an ambiguous 5xx must not be replayed blindly.
func withRetryables(keep func(error) bool) func(*ec2.Options) {
	return func(o *ec2.Options) {
		// The SDK's retryers are all RetryerV2; keeping that interface keeps adaptive mode's attempt tokens.
		if v2, ok := o.Retryer.(aws.RetryerV2); ok {
			o.Retryer = filteredRetryer{RetryerV2: v2, keep: keep}
		}
	}
}

type filteredRetryer struct {
	aws.RetryerV2
	keep func(error) bool
}

func (f filteredRetryer) IsErrorRetryable(err error) bool {
	return f.keep(err) && f.RetryerV2.IsErrorRetryable(err)
}

// otherBaseDelay is the backoff base of attempts that failed other than throttled: the SDK's.
const otherBaseDelay = 50 * time.Millisecond

// throttleJitter backs off throttled attempts by throttle and others as other.
type throttleJitter struct {
	throttle, other fullJitter
}

func (j throttleJitter) BackoffDelay(attempt int, err error) (time.Duration, error) {
	if isThrottleCode(errorCode(err)) {
		return j.throttle.BackoffDelay(attempt, err)
	}
	return j.other.BackoffDelay(attempt, err)
}

// fullJitter is rand[0,1) · min(base·2^(attempt-1), max).
type fullJitter struct {
	base, max time.Duration
}

func (j fullJitter) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	d := float64(j.base) * math.Pow(2, float64(max(attempt-1, 0)))
	d = min(d, float64(j.max))
	return time.Duration(rand.Float64() * d), nil
}
