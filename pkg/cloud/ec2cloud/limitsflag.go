package ec2cloud

import (
	"fmt"
	"strconv"
	"strings"
)

// RequestLimitsOff is the ParseRequestLimits value that turns pacing off.
const RequestLimitsOff = "off"

// ParseRequestLimits reads the driver's --ec2-request-limits: empty for EC2's default buckets, "off" for no
// pacing, or a comma-separated list of Key=PerSecond/Burst replacing single buckets of the defaults (an
// account whose limits AWS raised), Key being an action, "Describe*" for every Describe action without one of
// its own, or "*" for every other action. A bucket of Burst 0 leaves its actions unpaced.
func ParseRequestLimits(s string) (PaceOptions, error) {
	s = strings.TrimSpace(s)
	if s == RequestLimitsOff {
		return PaceOptions{Off: true}, nil
	}
	limits := DefaultRequestLimits()
	if s == "" {
		return PaceOptions{Limits: limits}, nil
	}
	for _, entry := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || key == "" {
			return PaceOptions{}, fmt.Errorf("request limit %q: want Action=PerSecond/Burst", entry)
		}
		if !validLimitKey(key) {
			return PaceOptions{}, fmt.Errorf("request limit %q: %q is not an EC2 action name, %q or %q", entry, key, limitDescribe, limitOther)
		}
		rate, burst, ok := strings.Cut(value, "/")
		if !ok {
			return PaceOptions{}, fmt.Errorf("request limit %q: want Action=PerSecond/Burst", entry)
		}
		perSecond, err := strconv.ParseFloat(rate, 64)
		if err != nil || !(perSecond >= 0 && perSecond <= 1e6) {
			return PaceOptions{}, fmt.Errorf("request limit %q: refill %q is not a rate per second from 0 to 1e6", entry, rate)
		}
		b, err := strconv.Atoi(burst)
		if err != nil || b < 0 || b > 1e6 {
			return PaceOptions{}, fmt.Errorf("request limit %q: burst %q is not a whole number from 0 to 1e6", entry, burst)
		}
		if b > 0 && perSecond == 0 {
			return PaceOptions{}, fmt.Errorf("request limit %q: a bucket that never refills would stop its action for good", entry)
		}
		limits[key] = Limit{PerSecond: perSecond, Burst: b}
	}
	return PaceOptions{Limits: limits}, nil
}

// validLimitKey reports an action name (letters and digits, starting upper case) or a wildcard key.
func validLimitKey(key string) bool {
	if key == limitDescribe || key == limitOther {
		return true
	}
	if key[0] < 'A' || key[0] > 'Z' {
		return false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
