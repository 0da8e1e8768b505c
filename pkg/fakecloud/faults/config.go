package faults

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// AllActions is the key that applies a latency, error or per-action rate limit to every action that has no
// entry of its own. A key ending in "*" (Describe*) applies to the actions it begins; an action's own entry
// comes first, then the longest such prefix, then AllActions.
const AllActions = "*"

// Transitions that Stuck can hold back; the state package defines them and asks Stuck with these names.
const (
	TransitionVolumeCreate = state.TransitionVolumeCreate
	TransitionVolumeDelete = state.TransitionVolumeDelete
	TransitionAttach       = state.TransitionAttach
	TransitionDetach       = state.TransitionDetach
	TransitionModify       = state.TransitionModify
	TransitionSnapshot     = state.TransitionSnapshot
)

// KnownTransition reports whether name is one of the Transition constants.
func KnownTransition(name string) bool {
	switch name {
	case TransitionVolumeCreate, TransitionVolumeDelete, TransitionAttach, TransitionDetach,
		TransitionModify, TransitionSnapshot:
		return true
	}
	return false
}

// Config is everything the injector does. The zero Config injects nothing. Map keys are EC2 action names
// (CreateVolume), prefixes (Describe*) or AllActions; the most specific entry replaces the others rather than
// adding to them.
type Config struct {
	// Latency is slept by Before, before anything else.
	Latency map[string]Duration `json:"latency,omitempty"`
	// Errors are EC2 errors answered instead of (Before) or after (the default) the handler's work.
	Errors map[string]ErrorFault `json:"errors,omitempty"`
	// RateLimit is one token bucket shared by all actions, like EC2's per-account throttling.
	RateLimit Limit `json:"rateLimit,omitzero"`
	// RateLimitProfile names a table of per-action buckets (ProfileEC2) applied beneath ActionRateLimits:
	// an ActionRateLimits entry replaces the profile's entry under the same key (Burst 0 turns it off).
	RateLimitProfile string `json:"rateLimitProfile,omitempty"`
	// ActionRateLimits are extra buckets per action; a prefix or AllActions entry gives every action it covers
	// a bucket of its own with that limit. An ACTION:unfiltered key (UnfilteredSuffix) is the bucket that
	// action's calls naming neither a filter nor a page draw from instead (see Unfiltered); it applies to that
	// action alone.
	ActionRateLimits map[string]Limit `json:"actionRateLimits,omitempty"`
	// Stuck names transitions (Transition constants) that must not progress. "attach:N" instead holds only the
	// next N attachments started: each stays attaching until it is detached, and later ones proceed; the count
	// drops as attachments take it, and the entry goes at zero.
	Stuck []string `json:"stuck,omitempty"`
}

// ErrorFault makes an action fail with an EC2 error.
type ErrorFault struct {
	// Rate is the probability, 0..1, that a call fails.
	Rate float64 `json:"rate"`
	// Code is the EC2 error code answered, e.g. RequestLimitExceeded or InternalError.
	Code string `json:"code"`
	// Message replaces the default message for Code when set.
	Message string `json:"message,omitempty"`
	// Status replaces the HTTP status ec2err gives Code when set (400..599).
	Status int `json:"status,omitempty"`
	// Count, when positive, is how many failures remain to be injected; the entry is dropped from the live
	// config when it reaches zero, so GET on the admin endpoint shows what is left. Zero means unlimited.
	Count int `json:"count,omitempty"`
	// Before answers the error before the handler runs. The default (after) lets the state change happen and
	// discards its result, which is what exercises client retries with ClientToken.
	Before bool `json:"before,omitempty"`
}

// Limit is a token bucket: Burst calls at once, refilled at RequestsPerSecond. Burst 0 turns it off;
// RequestsPerSecond 0 with a positive Burst allows Burst calls and then none.
type Limit struct {
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	Burst             int     `json:"burst"`
}

// enabled reports whether the bucket limits anything.
func (l Limit) enabled() bool { return l.Burst > 0 }

// Validate reports every problem in c at once, so an admin PUT can be fixed in one go.
func (c Config) Validate() error {
	var errs []error
	for action, d := range c.Latency {
		if err := validKey(action); err != nil {
			errs = append(errs, fmt.Errorf("latency: %w", err))
		}
		if d < 0 {
			errs = append(errs, fmt.Errorf("latency %s: negative duration %s", action, d))
		}
	}
	for action, f := range c.Errors {
		if err := f.validate(); err != nil {
			errs = append(errs, fmt.Errorf("errors %s: %w", action, err))
		}
		if err := validKey(action); err != nil {
			errs = append(errs, fmt.Errorf("errors: %w", err))
		}
	}
	if err := c.RateLimit.validate(); err != nil {
		errs = append(errs, fmt.Errorf("rateLimit: %w", err))
	}
	for action, l := range c.ActionRateLimits {
		if err := l.validate(); err != nil {
			errs = append(errs, fmt.Errorf("actionRateLimits %s: %w", action, err))
		}
		if err := validKey(strings.TrimSuffix(action, UnfilteredSuffix)); err != nil {
			errs = append(errs, fmt.Errorf("actionRateLimits: %w", err))
		} else if strings.HasSuffix(action, UnfilteredSuffix) && strings.Contains(action, "*") {
			errs = append(errs, fmt.Errorf("actionRateLimits: %q: an unfiltered bucket names one action", action))
		}
	}
	if _, err := ProfileLimits(c.RateLimitProfile); err != nil {
		errs = append(errs, fmt.Errorf("rateLimitProfile: %w", err))
	}
	counted := map[string]bool{}
	for _, entry := range c.Stuck {
		name, count, err := ParseStuckEntry(entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("stuck: %w", err))
			continue
		}
		if count > 0 && counted[name] {
			errs = append(errs, fmt.Errorf("stuck: %s has two counts", name))
		}
		counted[name] = counted[name] || count > 0
	}
	return errors.Join(errs...)
}

// ParseStuckEntry parses one Stuck entry: a Transition name, which holds every such transition, or "attach:N"
// (N ≥ 1), which holds the next N attachments started; count is 0 for the plain form.
func ParseStuckEntry(entry string) (name string, count int, err error) {
	name, rawCount, counted := strings.Cut(entry, ":")
	if !KnownTransition(name) {
		return "", 0, fmt.Errorf("unknown transition %q (want one of %s, %s, %s, %s, %s, %s, or %s:COUNT)", name,
			TransitionVolumeCreate, TransitionVolumeDelete, TransitionAttach, TransitionDetach,
			TransitionModify, TransitionSnapshot, TransitionAttach)
	}
	if !counted {
		return name, 0, nil
	}
	if name != TransitionAttach {
		return "", 0, fmt.Errorf("%q: only %s takes a count", entry, TransitionAttach)
	}
	if count, err = strconv.Atoi(rawCount); err != nil || count < 1 {
		return "", 0, fmt.Errorf("%q: the count must be a whole number from 1", entry)
	}
	return name, count, nil
}

func (f ErrorFault) validate() error {
	var errs []error
	// The negated comparison also catches NaN.
	if !(f.Rate >= 0 && f.Rate <= 1) {
		errs = append(errs, fmt.Errorf("rate %v not in [0,1]", f.Rate))
	}
	if f.Code == "" {
		errs = append(errs, errors.New("empty code"))
	}
	if f.Count < 0 {
		errs = append(errs, fmt.Errorf("negative count %d", f.Count))
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		errs = append(errs, fmt.Errorf("status %d not in 400..599", f.Status))
	}
	return errors.Join(errs...)
}

func (l Limit) validate() error {
	if !(l.RequestsPerSecond >= 0) || math.IsInf(l.RequestsPerSecond, 0) {
		return fmt.Errorf("requestsPerSecond %v must be finite and >= 0", l.RequestsPerSecond)
	}
	if l.Burst < 0 {
		return fmt.Errorf("negative burst %d", l.Burst)
	}
	return nil
}

// clone copies c deeply so neither the caller nor the injector can change the other's maps.
func (c Config) clone() Config {
	c.Latency = maps.Clone(c.Latency)
	c.Errors = maps.Clone(c.Errors)
	c.ActionRateLimits = maps.Clone(c.ActionRateLimits)
	c.Stuck = slices.Clone(c.Stuck)
	return c
}

// validKey refuses an empty key and a "*" anywhere but at the end, which would never match.
func validKey(key string) error {
	if key == "" {
		return errors.New("empty action name")
	}
	if i := strings.Index(key, "*"); i >= 0 && i != len(key)-1 {
		return fmt.Errorf("%q: a * may only end a key", key)
	}
	return nil
}

// lookup gives the entry for action: its own, else the longest prefix entry (Describe*), else AllActions.
func lookup[V any](m map[string]V, action string) (key string, v V, ok bool) {
	if v, ok = m[action]; ok {
		return action, v, true
	}
	best := -1
	for k, val := range m {
		prefix, isPattern := strings.CutSuffix(k, "*")
		if isPattern && len(prefix) > best && strings.HasPrefix(action, prefix) {
			best, key, v, ok = len(prefix), k, val, true
		}
	}
	return key, v, ok
}
