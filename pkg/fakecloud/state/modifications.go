package state

import (
	"strconv"
	"strings"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// ModifyInput is ModifyVolume's request; nil fields keep the volume's current value.
type ModifyInput struct {
	VolumeID    string
	SizeGiB     *int32
	VolumeType  string
	Iops        *int32
	Throughput  *int32
	MultiAttach *bool
	DryRun      bool
}

// ModifyVolume validates the target and starts a modification: modifying, then optimizing (the new size is
// usable from here, as on EBS), then completed.
func (s *State) ModifyVolume(in ModifyInput) (Modification, error) {
	var out Modification
	err := s.mutate(func(now time.Time) error {
		v, err := s.settledVolume(in.VolumeID)
		if err != nil {
			return err
		}
		if m, ok := s.modifications[v.ID]; ok && (m.State == ModModifying || m.State == ModOptimizing) {
			return ec2err.New(ec2err.CodeIncorrectModificationState,
				"Volume %s cannot be modified in modification state %s", v.ID, strings.ToUpper(m.State))
		}
		m, err := s.target(v, in)
		if err != nil {
			return err
		}
		if err := s.checkModificationRate(v, now); err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		m.State, m.StartTime = ModModifying, now
		m.OptimizingAt = now.Add(s.cfg.Durations.Modifying)
		m.CompletedAt = m.OptimizingAt.Add(s.cfg.Durations.Optimizing)
		s.modifications[v.ID] = m
		v.ModHistory = append(v.ModHistory, now)
		s.markDirty(kindModification, v.ID)
		s.markDirty(kindVolume, v.ID)
		s.markPending(kindModification, v.ID)
		out = m.view(now)
		return nil
	})
	return out, err
}

// defaultModifyIops is ModifyVolume's IOPS when it changes a volume to io1, io2 or gp3 without naming them.
const defaultModifyIops int32 = 3000

func (s *State) target(v *Volume, in ModifyInput) (*Modification, error) {
	m := &Modification{VolumeID: v.ID, OriginalSize: v.SizeGiB, OriginalIops: v.Iops, OriginalType: v.Type,
		OriginalThrough: v.Throughput, OriginalMulti: v.MultiAttach}
	spec := volumeSpec{Type: v.Type, SizeGiB: v.SizeGiB, MultiAttach: v.MultiAttach}
	if in.VolumeType != "" {
		spec.Type = in.VolumeType
	}
	if in.SizeGiB != nil {
		if *in.SizeGiB < v.SizeGiB {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "New size cannot be smaller than existing size")
		}
		spec.SizeGiB = *in.SizeGiB
	}
	if in.MultiAttach != nil {
		spec.MultiAttach = *in.MultiAttach
	}
	// IOPS and throughput carry over only where the target type takes them.
	lim, _ := limitsOf(spec.Type)
	switch {
	case in.Iops != nil:
		spec.Iops = in.Iops
	case lim.MaxIOPS > 0 && spec.Type == v.Type && v.Iops > 0:
		spec.Iops = &v.Iops
	case spec.Type != v.Type && (spec.Type == "io1" || spec.Type == "io2" || spec.Type == "gp3"):
		// EC2's documented default when the type changes to one with provisioned IOPS.
		iops := defaultModifyIops
		spec.Iops = &iops
	}
	switch {
	case in.Throughput != nil:
		spec.Throughput = in.Throughput
	case lim.MaxThroughput > 0 && spec.Type == v.Type && v.Throughput > 0:
		spec.Throughput = &v.Throughput
	}
	iops, tp, err := spec.settle()
	if err != nil {
		return nil, err
	}
	if spec.MultiAttach != v.MultiAttach && len(v.Attachments) > 0 {
		return nil, ec2err.New(ec2err.CodeInvalidParameterCombination, "Multi-Attach cannot be changed while volume %s is attached", v.ID)
	}
	m.TargetSize, m.TargetType, m.TargetIops, m.TargetThroughput, m.TargetMulti = spec.SizeGiB, spec.Type, iops, tp, spec.MultiAttach
	if m.TargetSize == m.OriginalSize && m.TargetType == m.OriginalType && m.TargetIops == m.OriginalIops &&
		m.TargetThroughput == m.OriginalThrough && m.TargetMulti == m.OriginalMulti {
		// Refused rather than started: a modification that changes nothing would spend one of the volume's few
		// modifications a day, and EC2's own answer here is unverified (see docs/fakecloud.md).
		return nil, ec2err.New(ec2err.CodeInvalidParameterValue,
			"The volume '%s' already has the requested configuration; a modification must change its size, type, IOPS, throughput or Multi-Attach.", v.ID)
	}
	return m, nil
}

func (s *State) checkModificationRate(v *Volume, now time.Time) error {
	if s.cfg.ModificationLimit <= 0 {
		v.ModHistory = nil
		return nil
	}
	cutoff := now.Add(-s.cfg.ModificationWindow)
	recent := v.ModHistory[:0]
	for _, t := range v.ModHistory {
		if t.After(cutoff) {
			recent = append(recent, t)
		}
	}
	v.ModHistory = recent
	if len(recent) >= s.cfg.ModificationLimit {
		return ec2err.New(ec2err.CodeVolumeModificationRateExceed,
			"You've reached the maximum modification rate per volume limit. Wait at least %s between modifications per EBS volume.",
			s.cfg.ModificationWindow/time.Duration(s.cfg.ModificationLimit))
	}
	return nil
}

// view copies a modification with its progress as of now.
func (m *Modification) view(now time.Time) Modification {
	c := *m
	if c.State == ModModifying || c.State == ModOptimizing {
		c.Progress = progress(m.StartTime, m.CompletedAt, now)
	}
	return c
}

// progress is how far now is between start and end, in percent, below 100 until the end.
func progress(start, end, now time.Time) int64 {
	total := end.Sub(start)
	if total <= 0 {
		return 99
	}
	return min(99, max(0, int64(100*now.Sub(start)/total)))
}

var modificationFields = fields[Modification]{
	"volume-id":            func(m *Modification) []string { return []string{m.VolumeID} },
	"modification-state":   func(m *Modification) []string { return []string{m.State} },
	"target-size":          func(m *Modification) []string { return []string{strconv.Itoa(int(m.TargetSize))} },
	"target-iops":          func(m *Modification) []string { return []string{strconv.Itoa(int(m.TargetIops))} },
	"target-volume-type":   func(m *Modification) []string { return []string{m.TargetType} },
	"original-size":        func(m *Modification) []string { return []string{strconv.Itoa(int(m.OriginalSize))} },
	"original-iops":        func(m *Modification) []string { return []string{strconv.Itoa(int(m.OriginalIops))} },
	"original-volume-type": func(m *Modification) []string { return []string{m.OriginalType} },
	"start-time":           func(m *Modification) []string { return timeValues(m.StartTime) },
	// EC2 spells these two in camel case, unlike its other filter names.
	"originalMultiAttachEnabled": func(m *Modification) []string { return []string{strconv.FormatBool(m.OriginalMulti)} },
	"targetMultiAttachEnabled":   func(m *Modification) []string { return []string{strconv.FormatBool(m.TargetMulti)} },
}

// DescribeVolumesModifications lists the latest modification of volumes.
func (s *State) DescribeVolumesModifications(in DescribeInput) ([]Modification, string, error) {
	var (
		out  []Modification
		next string
		err  error
	)
	s.read(func(now time.Time) {
		var match func(*Modification) bool
		if match, err = modificationFields.compile(in.Filters, func(*Modification) []Tag { return nil }); err != nil {
			return
		}
		var ids []string
		if len(in.IDs) > 0 {
			if ids, err = s.knownIDs(in.IDs, "vol", ec2err.CodeInvalidVolumeIDMalformed, ec2err.CodeInvalidVolumeNotFound, "volume",
				func(id string) bool { _, ok := s.volumes[id]; return ok }); err != nil {
				return
			}
			var never []string
			for _, id := range ids {
				if _, ok := s.modifications[id]; !ok {
					never = append(never, id)
				}
			}
			if len(never) > 0 {
				err = ec2err.New(ec2err.CodeInvalidVolumeModNotFound, "Modification for volume '%s' does not exist.", strings.Join(never, ","))
				return
			}
			if _, err = modificationPages.pageSize(in.Page, true); err != nil {
				return
			}
		} else {
			ids, next, err = modificationPages.page(&s.volumeIDs, in.Page, false, func(id string) bool {
				m, ok := s.modifications[id]
				return ok && match(m)
			})
		}
		for _, id := range ids {
			if m := s.modifications[id]; match(m) {
				out = append(out, m.view(now))
			}
		}
	})
	return out, next, err
}
