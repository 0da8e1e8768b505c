package state

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Fast snapshot restore states, spelled as EC2 spells them.
const (
	FSREnabling   = "enabling"
	FSROptimizing = "optimizing"
	FSREnabled    = "enabled"
	FSRDisabling  = "disabling"
	FSRDisabled   = "disabled"
)

// kindFastRestore records are keyed by snapshot and zone (fsrKey).
const kindFastRestore = "fastrestores"

// FastSnapshotRestore is the fast snapshot restore of one snapshot in one zone. Times are zero until the
// state is reached; a record stays (disabled) after it is disabled, as EC2 lists it, until its snapshot goes.
type FastSnapshotRestore struct {
	SnapshotID     string    `json:"snapshotId"`
	Zone           string    `json:"zone"`
	State          string    `json:"state"`
	OwnerID        string    `json:"ownerId"`
	EnablingTime   time.Time `json:"enablingTime,omitempty"`
	OptimizingTime time.Time `json:"optimizingTime,omitempty"`
	EnabledTime    time.Time `json:"enabledTime,omitempty"`
	DisablingTime  time.Time `json:"disablingTime,omitempty"`
	DisabledTime   time.Time `json:"disabledTime,omitempty"`
	// DueAt ends the current transitional state.
	DueAt time.Time `json:"dueAt,omitempty"`
	// StateTransitionReason says who moved it, as EC2 does ("Client.UserInitiated ...").
	StateTransitionReason string `json:"stateTransitionReason,omitempty"`
}

// fsrKey names a snapshot's fast snapshot restore in a zone. The "/" cannot occur in either part, and the
// key contains "-", as pagination tokens need.
func fsrKey(snapshotID, zone string) string { return snapshotID + "/" + zone }

// FSRItemError is one refused snapshot/zone pair of Enable/DisableFastSnapshotRestores.
type FSRItemError struct {
	SnapshotID string
	Zone       string
	Code       string
	Message    string
}

// FSRResult is the answer of Enable/DisableFastSnapshotRestores: EC2 answers per snapshot and zone, so a
// request with an unknown snapshot or zone succeeds for the rest.
type FSRResult struct {
	Successful   []FastSnapshotRestore
	Unsuccessful []FSRItemError
}

// FSRInput is the request of Enable/DisableFastSnapshotRestores.
type FSRInput struct {
	Zones       []string
	SnapshotIDs []string
	DryRun      bool
}

// EnableFastSnapshotRestores starts enabling fast snapshot restore for each snapshot in each zone: enabling,
// then optimizing, then enabled, each for its configured duration. A pair already enabled or on its way is
// answered in its current state; a disabling or disabled one starts over.
func (s *State) EnableFastSnapshotRestores(in FSRInput) (FSRResult, error) {
	return s.changeFastRestores(in, true)
}

// DisableFastSnapshotRestores starts disabling fast snapshot restore: disabling, then disabled. A pair that
// was never enabled is answered disabled.
func (s *State) DisableFastSnapshotRestores(in FSRInput) (FSRResult, error) {
	return s.changeFastRestores(in, false)
}

func (s *State) changeFastRestores(in FSRInput, enable bool) (FSRResult, error) {
	var out FSRResult
	err := s.mutate(func(now time.Time) error {
		if len(in.Zones) == 0 {
			return ec2err.Missing("AvailabilityZone")
		}
		if len(in.SnapshotIDs) == 0 {
			return ec2err.Missing("SourceSnapshotId")
		}
		for _, id := range in.SnapshotIDs {
			if err := checkID("snap", ec2err.CodeInvalidSnapshotIDMalformed, id); err != nil {
				return err
			}
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		seen := map[string]bool{}
		for _, id := range in.SnapshotIDs {
			_, known := s.snapshots[id]
			for _, zone := range in.Zones {
				key := fsrKey(id, zone)
				if seen[key] {
					continue
				}
				seen[key] = true
				if !known {
					out.Unsuccessful = append(out.Unsuccessful, FSRItemError{SnapshotID: id, Zone: zone, Code: ec2err.CodeInvalidSnapshotNotFound,
						Message: "The snapshot '" + id + "' does not exist."})
					continue
				}
				if !s.cfg.hasZone(zone) {
					out.Unsuccessful = append(out.Unsuccessful, FSRItemError{SnapshotID: id, Zone: zone, Code: ec2err.CodeInvalidParameterValue,
						Message: "The Availability Zone '" + zone + "' is not valid."})
					continue
				}
				out.Successful = append(out.Successful, s.changeFastRestore(now, id, zone, enable))
			}
		}
		return nil
	})
	return out, err
}

// changeFastRestore moves one pair towards enabled or disabled and returns its record as of now.
func (s *State) changeFastRestore(now time.Time, snapshotID, zone string, enable bool) FastSnapshotRestore {
	key := fsrKey(snapshotID, zone)
	f, ok := s.fastRestores[key]
	switch {
	case enable && (!ok || f.State == FSRDisabling || f.State == FSRDisabled):
		f = &FastSnapshotRestore{SnapshotID: snapshotID, Zone: zone, State: FSREnabling, OwnerID: s.cfg.AccountID,
			EnablingTime: now, DueAt: now.Add(s.cfg.Durations.FSREnabling),
			StateTransitionReason: "Client.UserInitiated - Lifecycle state transition"}
		if !ok {
			s.fastRestoreIDs.insert(key)
		}
		s.fastRestores[key] = f
	case !enable && !ok:
		// Nothing to disable: answered as disabled, and nothing is recorded.
		return FastSnapshotRestore{SnapshotID: snapshotID, Zone: zone, State: FSRDisabled, OwnerID: s.cfg.AccountID}
	case !enable && (f.State == FSREnabling || f.State == FSROptimizing || f.State == FSREnabled):
		f.State, f.DisablingTime, f.DueAt = FSRDisabling, now, now.Add(s.cfg.Durations.FSRDisabling)
		f.StateTransitionReason = "Client.UserInitiated - Lifecycle state transition"
	default:
		return *f
	}
	s.markDirty(kindFastRestore, key)
	s.markPending(kindFastRestore, key)
	klog.V(2).InfoS("Fast snapshot restore changing", "snapshotID", snapshotID, "zone", zone, "state", f.State)
	return *f
}

// advanceFastRestore runs a due fast snapshot restore transition; it reports whether nothing is left pending.
func (s *State) advanceFastRestore(now time.Time, key string) bool {
	f, ok := s.fastRestores[key]
	if !ok {
		return true
	}
	for due(now, f.DueAt) {
		switch f.State {
		case FSREnabling:
			f.State, f.OptimizingTime, f.DueAt = FSROptimizing, f.DueAt, f.DueAt.Add(s.cfg.Durations.FSROptimizing)
		case FSROptimizing:
			f.State, f.EnabledTime, f.DueAt = FSREnabled, f.DueAt, time.Time{}
		case FSRDisabling:
			f.State, f.DisabledTime, f.DueAt = FSRDisabled, f.DueAt, time.Time{}
		default:
			return true
		}
		s.markDirty(kindFastRestore, key)
	}
	return f.State == FSREnabled || f.State == FSRDisabled
}

// fastRestoreEnabled reports whether a snapshot restores fast in a zone now: only once enabled, as on EBS
// (optimizing gives some benefit there, which fakecloud does not model).
func (s *State) fastRestoreEnabled(snapshotID, zone string) bool {
	f, ok := s.fastRestores[fsrKey(snapshotID, zone)]
	return ok && f.State == FSREnabled
}

// dropFastRestores forgets a deleted snapshot's fast snapshot restores.
func (s *State) dropFastRestores(snapshotID string) {
	for _, z := range s.cfg.Zones {
		key := fsrKey(snapshotID, z.Name)
		if _, ok := s.fastRestores[key]; ok {
			delete(s.fastRestores, key)
			s.fastRestoreIDs.remove(key)
			s.markDirty(kindFastRestore, key)
		}
	}
}

var fastRestoreFields = fields[FastSnapshotRestore]{
	"snapshot-id":       func(f *FastSnapshotRestore) []string { return []string{f.SnapshotID} },
	"availability-zone": func(f *FastSnapshotRestore) []string { return []string{f.Zone} },
	"state":             func(f *FastSnapshotRestore) []string { return []string{f.State} },
	"owner-id":          func(f *FastSnapshotRestore) []string { return []string{f.OwnerID} },
}

// DescribeFastSnapshotRestores lists fast snapshot restores by filter, a page at a time.
func (s *State) DescribeFastSnapshotRestores(in DescribeInput) ([]FastSnapshotRestore, string, error) {
	var (
		out  []FastSnapshotRestore
		next string
		err  error
	)
	s.read(func(time.Time) {
		byName := withField(fastRestoreFields, "availability-zone-id", func(f *FastSnapshotRestore) []string { return s.zoneIDs(f.Zone) })
		var match func(*FastSnapshotRestore) bool
		if match, err = byName.compile(in.Filters, func(*FastSnapshotRestore) []Tag { return nil }); err != nil {
			return
		}
		var keys []string
		keys, next, err = fastRestorePages.page(&s.fastRestoreIDs, in.Page, false, func(key string) bool { return match(s.fastRestores[key]) })
		for _, key := range keys {
			out = append(out, *s.fastRestores[key])
		}
	})
	return out, next, err
}

// zoneIDs is a zone's ID, for the availability-zone-id filters.
func (s *State) zoneIDs(zone string) []string {
	if z, ok := s.cfg.zone(zone); ok {
		return []string{z.ID}
	}
	return nil
}

func withField[T any](f fields[T], name string, get func(*T) []string) fields[T] {
	out := make(fields[T], len(f)+1)
	for k, v := range f {
		out[k] = v
	}
	out[name] = get
	return out
}
