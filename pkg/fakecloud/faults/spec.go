package faults

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Spec is the command-line form of a Config, one string per flag:
//
//	--fault-latency=CreateVolume=200ms,*=5ms
//	--fault-error=AttachVolume=0.2:InternalError,CreateVolume=1:RequestLimitExceeded:2:before
//	--fault-rate-limit=50/100,CreateVolume=1/5
//	--fault-stuck=attach,detach
//	--fault-stuck=attach:1
//	--rate-limits=ec2
//
// An error entry is ACTION=RATE:CODE followed by optional :COUNT (failures to inject, 0 = unlimited) and
// :before or :after (default after). A rate-limit entry is RPS/BURST for the shared bucket or
// ACTION=RPS/BURST for an action's own bucket. A stuck entry is a transition, held every time, or attach:COUNT,
// which holds only the next COUNT attachments started (each until it is detached). --rate-limits names a
// profile of per-action buckets (ProfileEC2); --fault-rate-limit entries replace its entries under the same key
// (ACTION=RPS/0 turns one off) and add the shared bucket.
type Spec struct {
	Latency    string
	Errors     string
	RateLimit  string
	Stuck      string
	RateLimits string
}

// RegisterFlags binds s to the --fault-latency, --fault-error, --fault-rate-limit, --fault-stuck and
// --rate-limits flags.
func (s *Spec) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Latency, "fault-latency", s.Latency, "per-action latency, e.g. CreateVolume=200ms,*=5ms")
	fs.StringVar(&s.Errors, "fault-error", s.Errors,
		"per-action errors ACTION=RATE:CODE[:COUNT][:before|:after], e.g. AttachVolume=0.2:InternalError")
	fs.StringVar(&s.RateLimit, "fault-rate-limit", s.RateLimit,
		"token buckets RPS/BURST (shared) and ACTION=RPS/BURST (ACTION may be a prefix, Describe*, or ACTION:unfiltered), e.g. 50/100")
	fs.StringVar(&s.RateLimits, "rate-limits", s.RateLimits,
		"per-action token buckets by name: none, or ec2 (EC2's documented defaults: CreateVolume 100/5, AttachVolume 50/5, Describe* 100/20, …); --fault-rate-limit entries replace its own")
	fs.StringVar(&s.Stuck, "fault-stuck", s.Stuck,
		"transitions that never progress: volume-create,volume-delete,attach,detach,modify,snapshot; attach:N holds only the next N attachments (each until detached)")
}

// Config parses and validates every field of s.
func (s Spec) Config() (Config, error) {
	var c Config
	var err error
	if c.Latency, err = ParseLatency(s.Latency); err != nil {
		return Config{}, err
	}
	if c.Errors, err = ParseErrors(s.Errors); err != nil {
		return Config{}, err
	}
	if c.RateLimit, c.ActionRateLimits, err = ParseRateLimit(s.RateLimit); err != nil {
		return Config{}, err
	}
	if c.Stuck, err = ParseStuck(s.Stuck); err != nil {
		return Config{}, err
	}
	if c.RateLimitProfile = strings.TrimSpace(s.RateLimits); c.RateLimitProfile == "none" {
		c.RateLimitProfile = ""
	}
	if _, err := ProfileLimits(c.RateLimitProfile); err != nil {
		return Config{}, fmt.Errorf("rate-limits: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ParseLatency parses ACTION=DURATION[,...]. An empty spec gives nil.
func ParseLatency(spec string) (map[string]Duration, error) {
	return parseEntries(spec, "fault-latency", func(v string) (Duration, error) {
		d, err := time.ParseDuration(v)
		return Duration(d), err
	})
}

// ParseErrors parses ACTION=RATE:CODE[:COUNT][:before|:after][,...]. An empty spec gives nil.
func ParseErrors(spec string) (map[string]ErrorFault, error) {
	return parseEntries(spec, "fault-error", parseErrorFault)
}

func parseErrorFault(v string) (ErrorFault, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return ErrorFault{}, fmt.Errorf("want RATE:CODE[:COUNT][:before|:after], got %q", v)
	}
	rate, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		return ErrorFault{}, fmt.Errorf("rate: %w", err)
	}
	f := ErrorFault{Rate: rate, Code: parts[1]}
	var countSeen, phaseSeen bool
	for _, p := range parts[2:] {
		switch {
		case (p == "before" || p == "after") && !phaseSeen:
			phaseSeen = true
			f.Before = p == "before"
		case !countSeen && !phaseSeen:
			countSeen = true
			if f.Count, err = strconv.Atoi(p); err != nil {
				return ErrorFault{}, fmt.Errorf("count: %w", err)
			}
		default:
			return ErrorFault{}, fmt.Errorf("want RATE:CODE[:COUNT][:before|:after], got %q", v)
		}
	}
	return f, f.validate()
}

// ParseRateLimit parses RPS/BURST (the shared bucket) and ACTION=RPS/BURST entries, comma separated.
func ParseRateLimit(spec string) (shared Limit, perAction map[string]Limit, err error) {
	var sharedSeen bool
	var entries []string
	for _, e := range splitList(spec) {
		if strings.Contains(e, "=") {
			entries = append(entries, e)
			continue
		}
		if sharedSeen {
			return Limit{}, nil, fmt.Errorf("fault-rate-limit: shared limit given twice")
		}
		sharedSeen = true
		if shared, err = parseLimit(e); err != nil {
			return Limit{}, nil, fmt.Errorf("fault-rate-limit %q: %w", e, err)
		}
	}
	perAction, err = parseEntries(strings.Join(entries, ","), "fault-rate-limit", parseLimit)
	if err != nil {
		return Limit{}, nil, err
	}
	return shared, perAction, nil
}

func parseLimit(v string) (Limit, error) {
	rps, burst, ok := strings.Cut(v, "/")
	if !ok {
		return Limit{}, fmt.Errorf("want RPS/BURST, got %q", v)
	}
	var l Limit
	var err error
	if l.RequestsPerSecond, err = strconv.ParseFloat(rps, 64); err != nil {
		return Limit{}, fmt.Errorf("requests per second: %w", err)
	}
	if l.Burst, err = strconv.Atoi(burst); err != nil {
		return Limit{}, fmt.Errorf("burst: %w", err)
	}
	return l, l.validate()
}

// ParseStuck parses a comma-separated list of Transition names and attach:COUNT entries.
func ParseStuck(spec string) ([]string, error) {
	list := splitList(spec)
	for _, entry := range list {
		if _, _, err := ParseStuckEntry(entry); err != nil {
			return nil, fmt.Errorf("fault-stuck: %w", err)
		}
	}
	return list, nil
}

// parseEntries parses comma-separated KEY=VALUE entries, refusing empty keys and repeated keys.
func parseEntries[V any](spec, flagName string, parse func(string) (V, error)) (map[string]V, error) {
	list := splitList(spec)
	if len(list) == 0 {
		return nil, nil
	}
	out := make(map[string]V, len(list))
	for _, e := range list {
		key, val, ok := strings.Cut(e, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, fmt.Errorf("%s: want ACTION=VALUE, got %q", flagName, e)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s: %s given twice", flagName, key)
		}
		v, err := parse(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flagName, key, err)
		}
		out[key] = v
	}
	return out, nil
}

// splitList splits on commas, trimming spaces and dropping empty items.
func splitList(spec string) []string {
	var out []string
	for _, p := range strings.Split(spec, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
