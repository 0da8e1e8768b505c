package state

import (
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Lock modes and lock states, as EC2 spells them.
const (
	LockGovernance        = "governance"
	LockCompliance        = "compliance"
	LockComplianceCoolOff = "compliance-cooloff"
	LockExpired           = "expired"
)

// Limits of LockSnapshot's parameters, from EC2's documentation.
const (
	maxLockDays     = 36500
	maxCoolOffHours = 72
	day             = 24 * time.Hour
)

// LockSnapshotInput is LockSnapshot's request: a lock for DurationDays or until ExpirationDate (one of them).
type LockSnapshotInput struct {
	SnapshotID     string
	Mode           string
	DurationDays   *int32
	ExpirationDate *time.Time
	CoolOffHours   *int32
	DryRun         bool
}

// LockState is the lock's state at now.
func (l *SnapshotLock) LockState(now time.Time) string {
	switch {
	case !now.Before(l.ExpiresOn):
		return LockExpired
	case l.Mode == LockCompliance && now.Before(l.CoolOffEnds):
		return LockComplianceCoolOff
	}
	return l.Mode
}

// LockedSnapshot is a snapshot's lock as DescribeLockedSnapshots and LockSnapshot answer it.
type LockedSnapshot struct {
	SnapshotID string
	OwnerID    string
	State      string
	Lock       SnapshotLock
}

// held reports whether the lock still keeps the snapshot from being deleted.
func (l *SnapshotLock) held(now time.Time) bool { return l != nil && l.LockState(now) != LockExpired }

// LockSnapshot locks a pending or completed snapshot, or changes its lock as EC2 allows: anything while the
// lock is governance, in its cooling-off period or expired; once a compliance lock's cooling-off period is
// over, only a later expiry in compliance mode.
func (s *State) LockSnapshot(in LockSnapshotInput) (LockedSnapshot, error) {
	var out LockedSnapshot
	err := s.mutate(func(now time.Time) error {
		sn, err := s.snapshotByID(in.SnapshotID)
		if err != nil {
			return err
		}
		lock, err := newLock(in, now)
		if err != nil {
			return err
		}
		if sn.State != SnapshotPending && sn.State != SnapshotCompleted {
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is in state '%s'; only a pending or completed snapshot can be locked.", sn.ID, sn.State)
		}
		if old := sn.Lock; old != nil && old.LockState(now) == LockCompliance {
			switch {
			case lock.Mode != LockCompliance:
				return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is locked in compliance mode past its cooling-off period; its lock mode cannot change.", sn.ID)
			case in.CoolOffHours != nil:
				return ec2err.New(ec2err.CodeInvalidParameterCombination, "The snapshot '%s' is past its cooling-off period; CoolOffPeriod cannot be given.", sn.ID)
			case lock.ExpiresOn.Before(old.ExpiresOn):
				return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is locked in compliance mode past its cooling-off period; its lock can only be extended.", sn.ID)
			}
			lock.CreatedOn, lock.CoolOffHours, lock.CoolOffEnds = old.CreatedOn, old.CoolOffHours, old.CoolOffEnds
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		sn.Lock = lock
		s.markDirty(kindSnapshot, sn.ID)
		out = LockedSnapshot{SnapshotID: sn.ID, OwnerID: sn.OwnerID, State: lock.LockState(now), Lock: *lock}
		return nil
	})
	return out, err
}

// newLock checks LockSnapshot's parameters and makes the lock they ask for, starting now.
func newLock(in LockSnapshotInput, now time.Time) (*SnapshotLock, error) {
	switch in.Mode {
	case "":
		return nil, ec2err.Missing("LockMode")
	case LockGovernance, LockCompliance:
	default:
		return nil, ec2err.InvalidValue("LockMode", in.Mode, "Expecting governance or compliance.")
	}
	l := &SnapshotLock{Mode: in.Mode, CreatedOn: now}
	switch {
	case in.DurationDays != nil && in.ExpirationDate != nil:
		return nil, ec2err.New(ec2err.CodeInvalidParameterCombination, "Specify either LockDuration or ExpirationDate, not both.")
	case in.DurationDays != nil:
		if d := *in.DurationDays; d < 1 || d > maxLockDays {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The lock duration must be between 1 and %d days.", maxLockDays)
		}
		l.DurationDays, l.DurationStart = *in.DurationDays, now
		l.ExpiresOn = now.Add(time.Duration(*in.DurationDays) * day)
	case in.ExpirationDate != nil:
		if !in.ExpirationDate.After(now) || in.ExpirationDate.After(now.Add(maxLockDays*day)) {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The expiration date must be in the future, within %d days.", maxLockDays)
		}
		l.ExpiresOn = in.ExpirationDate.UTC()
	default:
		return nil, ec2err.Missing("LockDuration")
	}
	if in.CoolOffHours != nil {
		h := *in.CoolOffHours
		switch {
		case in.Mode != LockCompliance:
			return nil, ec2err.New(ec2err.CodeInvalidParameterCombination, "CoolOffPeriod is only for compliance mode.")
		case h < 1 || h > maxCoolOffHours:
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The cooling-off period must be between 1 and %d hours.", maxCoolOffHours)
		}
		l.CoolOffHours, l.CoolOffEnds = h, now.Add(time.Duration(h)*time.Hour)
	}
	return l, nil
}

// UnlockSnapshot removes a governance lock, or a compliance lock within its cooling-off period.
func (s *State) UnlockSnapshot(id string, dryRun bool) error {
	return s.mutate(func(now time.Time) error {
		sn, err := s.snapshotByID(id)
		if err != nil {
			return err
		}
		switch {
		case sn.Lock == nil:
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is not locked.", id)
		case sn.Lock.LockState(now) == LockCompliance:
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is locked in compliance mode past its cooling-off period and cannot be unlocked.", id)
		}
		if dryRun {
			return ec2err.DryRun()
		}
		sn.Lock = nil
		s.markDirty(kindSnapshot, id)
		return nil
	})
}

// checkUnlocked refuses to delete a snapshot whose lock has not expired.
func checkUnlocked(sn *Snapshot, now time.Time) error {
	if sn.Lock.held(now) {
		return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is locked (%s) until %s and cannot be deleted.",
			sn.ID, sn.Lock.LockState(now), sn.Lock.ExpiresOn.UTC().Format(time.RFC3339))
	}
	return nil
}

// DescribeLockedSnapshots lists the snapshots that have a lock (expired ones too), by ID or filter
// (lock-state), a page at a time.
func (s *State) DescribeLockedSnapshots(in DescribeInput) ([]LockedSnapshot, string, error) {
	var (
		out  []LockedSnapshot
		next string
		err  error
	)
	s.read(func(now time.Time) {
		fields := fields[Snapshot]{"lock-state": func(sn *Snapshot) []string { return []string{sn.Lock.LockState(now)} }}
		for _, f := range in.Filters {
			if _, ok := fields[f.Name]; !ok {
				err = ec2err.New(ec2err.CodeInvalidParameterValue, "The filter '%s' is invalid", f.Name)
				return
			}
		}
		var match func(*Snapshot) bool
		if match, err = fields.compile(in.Filters, nil); err != nil {
			return
		}
		var ids []string
		if ids, next, err = s.listSnapshots(in, func(sn *Snapshot) bool { return sn.Lock != nil && match(sn) }); err != nil {
			return
		}
		for _, id := range ids {
			sn := s.snapshots[id]
			out = append(out, LockedSnapshot{SnapshotID: id, OwnerID: sn.OwnerID, State: sn.Lock.LockState(now), Lock: *sn.Lock})
		}
	})
	return out, next, err
}
