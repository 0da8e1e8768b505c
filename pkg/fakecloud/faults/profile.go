package faults

import (
	"fmt"
	"maps"
	"net/url"
	"strings"
)

// ProfileEC2 is EC2's default request-token buckets per account and region, as AWS documents them in "Request
// throttling for the Amazon EC2 API". Each action has a bucket of its own (capacity / refill per second):
//
//   - CreateVolume, DeleteVolume, CreateSnapshot, DeleteSnapshot: 100 / 5
//   - CreateTags, DeleteTags: 100 / 10
//   - every other action, the mutating ones (AttachVolume, DetachVolume, ModifyVolume, CopyVolumes,
//     Start/Stop/TerminateInstances, ModifyInstanceAttribute): 50 / 5
//   - Describe*: 100 / 20
//   - DescribeVolumes, DescribeInstances, DescribeSnapshots naming neither a filter nor a page (Unfiltered):
//     50 / 10, instead of their own bucket
//
// EC2's resource-token buckets (instances started or stopped, on top of the request buckets) are not modelled.
const ProfileEC2 = "ec2"

// UnfilteredSuffix turns an action name into the key of the bucket its Unfiltered calls draw from.
const UnfilteredSuffix = ":unfiltered"

// profile builds a named rate-limit table, keyed as Config.ActionRateLimits; a function, so no caller can
// change the table another reads.
func profile(name string) (map[string]Limit, bool) {
	if name != ProfileEC2 {
		return nil, false
	}
	return map[string]Limit{
		"CreateVolume":   {RequestsPerSecond: 5, Burst: 100},
		"DeleteVolume":   {RequestsPerSecond: 5, Burst: 100},
		"CreateSnapshot": {RequestsPerSecond: 5, Burst: 100},
		"DeleteSnapshot": {RequestsPerSecond: 5, Burst: 100},
		"CreateTags":     {RequestsPerSecond: 10, Burst: 100},
		"DeleteTags":     {RequestsPerSecond: 10, Burst: 100},
		"Describe*":      {RequestsPerSecond: 20, Burst: 100},
		// Every action fakecloud serves that is not named above and is not a Describe mutates.
		AllActions: {RequestsPerSecond: 5, Burst: 50},

		"DescribeVolumes" + UnfilteredSuffix:   {RequestsPerSecond: 10, Burst: 50},
		"DescribeInstances" + UnfilteredSuffix: {RequestsPerSecond: 10, Burst: 50},
		"DescribeSnapshots" + UnfilteredSuffix: {RequestsPerSecond: 10, Burst: 50},
	}, true
}

// ProfileNames lists the rate-limit profiles, for flag help and errors.
func ProfileNames() []string { return []string{ProfileEC2} }

// ProfileLimits returns a copy of the named profile's buckets, keyed as Config.ActionRateLimits; "" and "none"
// give none.
func ProfileLimits(name string) (map[string]Limit, error) {
	if name == "" || name == "none" {
		return nil, nil
	}
	p, ok := profile(name)
	if !ok {
		return nil, fmt.Errorf("unknown rate-limit profile %q (want none or one of %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return p, nil
}

// ActionLimits is the per-action table c's buckets follow: its profile's entries overlaid with its own
// ActionRateLimits. A profile c does not know gives none (Validate refuses it).
func (c Config) ActionLimits() map[string]Limit {
	limits, _ := ProfileLimits(c.RateLimitProfile)
	if limits == nil {
		limits = map[string]Limit{}
	}
	maps.Copy(limits, c.ActionRateLimits)
	return limits
}

// LimitFor is the bucket a call of action draws from under limits (keyed as Config.ActionRateLimits): the
// action's ACTION:unfiltered entry when the call is unfiltered and that entry is on (Burst > 0), else its own,
// prefix or AllActions entry. The bench computes its floor with it.
func LimitFor(limits map[string]Limit, action string, unfiltered bool) (key string, l Limit, ok bool) {
	if unfiltered {
		if l, ok := limits[action+UnfilteredSuffix]; ok && l.enabled() {
			return action + UnfilteredSuffix, l, true
		}
	}
	return lookup(limits, action)
}

// Unfiltered reports whether an EC2 Query request's parameters name neither a filter (Filter.N…) nor a page
// (MaxResults, NextToken): the calls AWS charges to the smaller "unfiltered and unpaginated" buckets. Lists of
// IDs (VolumeId.N, InstanceId.N, SnapshotId.N) and OwnerId.N are neither a filter nor pagination in AWS's
// wording, so a call naming only IDs is unfiltered. (EC2 refuses MaxResults beside VolumeId.N, so such a call
// reaches the larger bucket only with a volume-id filter, which is what ec2cloud sends.)
func Unfiltered(params url.Values) bool {
	for k, v := range params {
		switch {
		case strings.HasPrefix(k, "Filter."):
			return false
		case (k == "MaxResults" || k == "NextToken") && len(v) > 0 && v[0] != "":
			return false
		}
	}
	return true
}
