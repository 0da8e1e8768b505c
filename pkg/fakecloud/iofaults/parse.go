package iofaults

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// Grammar is the --fault-io rule syntax, for flag help and errors.
const Grammar = `VOLUME[@OFFSET+LENGTH][:OPS]:EFFECT[:p=PROBABILITY][:count=N]; VOLUME is an ID or *; ` +
	`OFFSET and LENGTH are bytes (suffixes Ki, Mi, Gi; LENGTH 0 runs to the end); OPS is read,write,fsync,fallocate ` +
	`(default all); EFFECT is an errno (eio, enospc, erofs, …), latency=DURATION, readonly or hang`

// ParseRule parses one rule of the --fault-io grammar, e.g.
//
//	vol-0123:read:eio
//	*:write:latency=20ms
//	vol-1@1Mi+4096:read:eio:count=3
//	vol-1:readonly
//	vol-1:hang
//	vol-1:read,write:enospc:p=0.1
func ParseRule(spec string) (Rule, error) {
	fields := strings.Split(strings.TrimSpace(spec), ":")
	if len(fields) < 2 {
		return Rule{}, fmt.Errorf("%q: want %s", spec, Grammar)
	}
	var r Rule
	target := fields[0]
	if vol, rng, ok := strings.Cut(target, "@"); ok {
		off, length, ok := strings.Cut(rng, "+")
		if !ok {
			return Rule{}, fmt.Errorf("%q: range %q is not OFFSET+LENGTH", spec, rng)
		}
		var err error
		if r.Offset, err = parseBytes(off); err != nil {
			return Rule{}, fmt.Errorf("%q: offset: %w", spec, err)
		}
		if r.Length, err = parseBytes(length); err != nil {
			return Rule{}, fmt.Errorf("%q: length: %w", spec, err)
		}
		target = vol
	}
	r.Volume = target
	rest := fields[1:]
	// OPS, when present, is the field before the effect: a list of op names.
	if len(rest) > 1 && isOpList(rest[0]) {
		r.Ops = strings.Split(rest[0], ",")
		rest = rest[1:]
	}
	if err := parseEffect(&r, rest[0]); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", spec, err)
	}
	var seenP, seenCount bool
	for _, m := range rest[1:] {
		key, val, ok := strings.Cut(m, "=")
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("modifier %q is not p=PROBABILITY or count=N", m)
		case key == "p" && !seenP:
			seenP = true
			r.Probability, err = strconv.ParseFloat(val, 64)
			if err == nil && (r.Probability <= 0 || r.Probability > 1) {
				err = fmt.Errorf("probability %s is not in (0, 1]", val)
			}
		case key == "count" && !seenCount:
			seenCount = true
			r.Count, err = strconv.ParseInt(val, 10, 64)
			if err == nil && r.Count <= 0 {
				err = fmt.Errorf("count %s is not positive", val)
			}
		case key == "p" || key == "count":
			err = fmt.Errorf("%s given twice", key)
		default:
			err = fmt.Errorf("unknown modifier %q (want p= or count=)", key)
		}
		if err != nil {
			return Rule{}, fmt.Errorf("%q: %w", spec, err)
		}
	}
	if _, err := compile(r); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", spec, err)
	}
	return r, nil
}

func isOpList(s string) bool {
	for _, name := range strings.Split(s, ",") {
		if _, ok := opNames[name]; !ok {
			return false
		}
	}
	return true
}

func parseEffect(r *Rule, s string) error {
	name, arg, hasArg := strings.Cut(s, "=")
	switch strings.ToLower(name) {
	case "latency":
		if !hasArg {
			return fmt.Errorf("latency needs a duration: latency=20ms")
		}
		d, err := time.ParseDuration(arg)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		r.Effect, r.Latency = EffectLatency, faults.Duration(d)
		return nil
	case "error":
		r.Effect, r.Errno = EffectError, strings.ToUpper(arg)
		if hasArg && arg == "" {
			return fmt.Errorf("error= needs an errno name")
		}
		return nil
	case "readonly", "hang":
		if hasArg {
			return fmt.Errorf("%s takes no value", name)
		}
		r.Effect = Effect(strings.ToLower(name))
		return nil
	}
	if _, ok := errnos[strings.ToUpper(name)]; ok && !hasArg {
		r.Effect, r.Errno = EffectError, strings.ToUpper(name)
		return nil
	}
	if _, ok := opNames[name]; ok {
		return fmt.Errorf("ops %q must be followed by an effect", s)
	}
	return fmt.Errorf("unknown effect %q (want an errno such as eio, latency=DURATION, readonly or hang)", s)
}

// parseBytes reads a byte count: digits with an optional Ki, Mi or Gi suffix.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return n * mult, nil
}

// ParseRules parses rules separated by ';'. Empty entries are skipped.
func ParseRules(spec string) ([]Rule, error) {
	var out []Rule
	for _, item := range strings.Split(spec, ";") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		r, err := ParseRule(item)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Flag collects --fault-io rules: the flag may be repeated and each value may hold several rules separated
// by ';'. Each value is parsed as it is given, so a bad rule fails flag parsing with its reason.
type Flag struct {
	Rules []Rule
	specs []string
}

func (f *Flag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.specs, ";")
}

func (f *Flag) Set(v string) error {
	rules, err := ParseRules(v)
	if err != nil {
		return err
	}
	if len(f.Rules)+len(rules) > MaxRules {
		return fmt.Errorf("more than %d rules", MaxRules)
	}
	f.Rules = append(f.Rules, rules...)
	f.specs = append(f.specs, v)
	return nil
}
