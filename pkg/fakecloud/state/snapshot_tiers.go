package state

import (
	"strconv"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Storage tiers and tiering operation states, as EC2 spells them.
const (
	TierStandard = "standard"
	TierArchive  = "archive"

	TieringArchiving        = "archival-in-progress"
	TieringArchived         = "archival-completed"
	TieringTemporaryRestore = "temporary-restore-completed"
	TieringPermanentRestore = "permanent-restore-completed"
)

// maxTemporaryRestoreDays is EC2's limit on TemporaryRestoreDays.
const maxTemporaryRestoreDays = 180

// at is the tiering's storage tier and last operation at now, and a temporary restore's expiry. Archival takes
// the snapshot duration; a restore is complete at once (EC2's take hours); a temporary restore goes back to
// the archive when it expires.
func (tg *SnapshotTiering) at(now time.Time) (tier, op string, restoreExpiry time.Time) {
	switch {
	case tg == nil:
		return TierStandard, "", time.Time{}
	case tg.Permanent:
		return TierStandard, TieringPermanentRestore, time.Time{}
	case now.Before(tg.ArchivedAt):
		return TierStandard, TieringArchiving, time.Time{}
	case !tg.RestoreStart.IsZero() && now.Before(tg.RestoreExpiry):
		return TierStandard, TieringTemporaryRestore, tg.RestoreExpiry
	}
	return TierArchive, TieringArchived, time.Time{}
}

// archived reports whether a volume cannot be made from the snapshot: it is in the archive tier.
func (sn *Snapshot) archived(now time.Time) bool {
	tier, _, _ := sn.Tiering.at(now)
	return tier == TierArchive
}

// errArchived refuses to use an archived snapshot's data.
func errArchived(id string) error {
	return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is in the archive tier; restore it (RestoreSnapshotTier) before using it.", id)
}

// ModifySnapshotTier moves a completed snapshot to the archive tier; it returns when archival began.
func (s *State) ModifySnapshotTier(id, tier string, dryRun bool) (time.Time, error) {
	var start time.Time
	err := s.mutate(func(now time.Time) error {
		sn, err := s.snapshotByID(id)
		if err != nil {
			return err
		}
		if tier != "" && tier != TierArchive {
			return ec2err.InvalidValue("StorageTier", tier, "Expecting archive.")
		}
		if sn.State != SnapshotCompleted {
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is in state '%s'; only a completed snapshot can be archived.", id, sn.State)
		}
		if _, op, _ := sn.Tiering.at(now); op == TieringArchiving || op == TieringArchived {
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is already archived or being archived.", id)
		}
		if dryRun {
			return ec2err.DryRun()
		}
		sn.Tiering = &SnapshotTiering{ArchiveStart: now, ArchivedAt: now.Add(s.cfg.Durations.Snapshot)}
		s.markDirty(kindSnapshot, id)
		start = now
		return nil
	})
	return start, err
}

// RestoreSnapshotTier restores an archived snapshot to the standard tier, for days or (permanent) for good; a
// temporary restore may be given a new period. It returns the restore as recorded.
func (s *State) RestoreSnapshotTier(id string, days *int32, permanent, dryRun bool) (SnapshotTiering, error) {
	var out SnapshotTiering
	err := s.mutate(func(now time.Time) error {
		sn, err := s.snapshotByID(id)
		if err != nil {
			return err
		}
		switch {
		case permanent && days != nil:
			return ec2err.New(ec2err.CodeInvalidParameterCombination, "Specify either TemporaryRestoreDays or PermanentRestore, not both.")
		case !permanent && days == nil:
			return ec2err.Missing("TemporaryRestoreDays")
		case days != nil && (*days < 1 || *days > maxTemporaryRestoreDays):
			return ec2err.InvalidValue("TemporaryRestoreDays", strconv.Itoa(int(*days)), "Expecting 1 to 180 days.")
		}
		if _, op, _ := sn.Tiering.at(now); op != TieringArchived && op != TieringTemporaryRestore {
			return ec2err.New(ec2err.CodeIncorrectState, "The snapshot '%s' is not in the archive tier.", id)
		}
		if dryRun {
			return ec2err.DryRun()
		}
		tg := sn.Tiering
		tg.RestoreStart, tg.Permanent, tg.RestoreDays, tg.RestoreExpiry = now, permanent, 0, time.Time{}
		if days != nil {
			tg.RestoreDays, tg.RestoreExpiry = *days, now.Add(time.Duration(*days)*day)
		}
		s.markDirty(kindSnapshot, id)
		out = *tg
		return nil
	})
	return out, err
}

// SnapshotTierStatus is one snapshot's tiering as DescribeSnapshotTierStatus reports it.
type SnapshotTierStatus struct {
	Snapshot
	LastOperation string
	Progress      int
}

// DescribeSnapshotTierStatus lists the snapshots' tiering, by filter (snapshot-id, volume-id,
// last-tiering-operation), a page at a time.
func (s *State) DescribeSnapshotTierStatus(in DescribeInput) ([]SnapshotTierStatus, string, error) {
	var (
		out  []SnapshotTierStatus
		next string
		err  error
	)
	s.read(func(now time.Time) {
		f := fields[Snapshot]{
			"snapshot-id": snapshotFields["snapshot-id"],
			"volume-id":   snapshotFields["volume-id"],
			"last-tiering-operation": func(sn *Snapshot) []string {
				_, op, _ := sn.Tiering.at(now)
				return []string{op}
			},
		}
		var match func(*Snapshot) bool
		if match, err = f.compile(in.Filters, func(sn *Snapshot) []Tag { return sn.Tags }); err != nil {
			return
		}
		var ids []string
		if ids, next, err = s.listSnapshots(DescribeInput{Page: in.Page}, match); err != nil {
			return
		}
		for _, id := range ids {
			sn := s.snapshots[id]
			st := SnapshotTierStatus{Snapshot: sn.view(now)}
			_, st.LastOperation, _ = sn.Tiering.at(now)
			st.Progress = 100
			if st.LastOperation == TieringArchiving {
				st.Progress = int(progress(sn.Tiering.ArchiveStart, sn.Tiering.ArchivedAt, now))
			}
			out = append(out, st)
		}
	})
	return out, next, err
}
