package state

import (
	"fmt"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// EC2's bounds on VolumeInitializationRate, in MiB/s.
const (
	MinInitRate = 100
	MaxInitRate = 300
)

// Initialization types, as EC2 spells them (InitializationStatusDetails).
const (
	InitDefault         = "default"
	InitProvisionedRate = "provisioned-rate"
	InitVolumeCopy      = "volume-copy"
)

// applyInitRate checks VolumeInitializationRate and decides whether a restore is fast: it is when the
// snapshot's fast snapshot restore is enabled in the volume's zone and no rate is asked (a rate wins over fast
// snapshot restore, as EC2 documents).
func (s *State) applyInitRate(v *Volume, in CreateVolumeInput) error {
	if in.InitRate != nil {
		switch rate := *in.InitRate; {
		case in.SnapshotID == "":
			return ec2err.New(ec2err.CodeInvalidParameterCombination,
				"The parameter VolumeInitializationRate is only supported for volumes created from snapshots.")
		case rate < MinInitRate || rate > MaxInitRate:
			return ec2err.InvalidValue("VolumeInitializationRate", fmt.Sprint(rate),
				fmt.Sprintf("The volume initialization rate must be between %d and %d MiB/s.", MinInitRate, MaxInitRate))
		default:
			v.InitRate = rate
			return nil
		}
	}
	v.FastRestored = v.SnapshotID != "" && s.fastRestoreEnabled(v.SnapshotID, v.Zone)
	return nil
}

// Initialization is how far a volume's blocks are initialized: EBS fetches a restored volume's blocks from
// its snapshot (or a copy's from its source) in the background, and a block not fetched yet reads slowly.
// fakecloud models the background fetch as a sequential sweep from the volume's first byte at a constant
// rate from its creation; a block layer reads bytes below InitializedBytes at full speed.
type Initialization struct {
	// Type is InitDefault, InitProvisionedRate or InitVolumeCopy; empty for a volume that needs none (an
	// empty volume).
	Type string
	// TotalBytes is how much must be fetched: the source's size. InitializedBytes of it are fetched now.
	TotalBytes       int64
	InitializedBytes int64
	// RateBytes is the background fetch's rate in bytes per second; 0 when it is done.
	RateBytes int64
	// Remaining is the time left until it is done.
	Remaining time.Duration
}

// Done reports whether every block reads at full speed.
func (i Initialization) Done() bool { return i.InitializedBytes >= i.TotalBytes }

// Progress is how much is fetched, in percent, as EC2 reports it: 100 only once done.
func (i Initialization) Progress() int64 {
	if i.Done() {
		return 100
	}
	return min(99, 100*i.InitializedBytes/i.TotalBytes)
}

// VolumeInitialization tells how far a volume is initialized now; EC2's errors for an unknown volume.
func (s *State) VolumeInitialization(volumeID string) (Initialization, error) {
	var (
		out Initialization
		err error
	)
	s.read(func(now time.Time) {
		var v *Volume
		if v, err = s.volume(volumeID); err == nil {
			out = s.initialization(v, now)
		}
	})
	return out, err
}

// initialization works out v's initialization at now from its creation, its source and the rates.
func (s *State) initialization(v *Volume, now time.Time) Initialization {
	var out Initialization
	var rateMiB int32
	switch {
	case v.SourceVolumeID != "":
		out.Type, rateMiB = InitVolumeCopy, s.cfg.RestoreInitRate
	case v.SnapshotID == "":
		return out
	case v.InitRate > 0:
		out.Type, rateMiB = InitProvisionedRate, v.InitRate
	default:
		out.Type, rateMiB = InitDefault, s.cfg.RestoreInitRate
	}
	// The source's bytes: a restore or copy may be larger than its source, and the rest is empty.
	out.TotalBytes = gib(v.SourceGiB)
	if v.SourceGiB == 0 {
		out.TotalBytes = gib(v.SizeGiB)
	}
	rate := int64(rateMiB) << 20
	elapsed := max(0, now.Sub(v.CreateTime))
	// Whole seconds first, so that a long elapsed time cannot overflow the product.
	secs := int64(elapsed / time.Second)
	if v.FastRestored || rate <= 0 || secs > out.TotalBytes/rate {
		out.InitializedBytes = out.TotalBytes
		return out
	}
	// Fractions of a second in floating point: a large rate times nanoseconds would overflow.
	done := secs*rate + int64(float64(rate)*(elapsed%time.Second).Seconds())
	if done >= out.TotalBytes {
		out.InitializedBytes = out.TotalBytes
		return out
	}
	left := out.TotalBytes - done
	out.InitializedBytes, out.RateBytes = done, rate
	out.Remaining = time.Duration(left/rate)*time.Second + time.Duration(float64(left%rate)/float64(rate)*float64(time.Second))
	return out
}

// VolumeStatus is one volume's DescribeVolumeStatus item.
type VolumeStatus struct {
	VolumeID string
	Zone     string
	// Status is ok, or insufficient-data while the volume is being created.
	Status string
	// IOPerformance is the io-performance check: normal for the types EBS checks (io1, io2, gp3),
	// not-applicable for the rest.
	IOPerformance string
	// Init is the volume's initialization (Type empty when it needs none).
	Init Initialization
}

// Volume status values.
const (
	StatusOK               = "ok"
	StatusInsufficientData = "insufficient-data"
	InitStateInitializing  = "initializing"
	InitStateCompleted     = "completed"
)

// InitializationState is the initialization-state detail: initializing until done, then completed; empty
// when the volume needs no initialization.
func (st VolumeStatus) InitializationState() string {
	switch {
	case st.Init.Type == "":
		return ""
	case st.Init.Done():
		return InitStateCompleted
	}
	return InitStateInitializing
}

func (s *State) volumeStatus(v *Volume, now time.Time) VolumeStatus {
	st := VolumeStatus{VolumeID: v.ID, Zone: v.Zone, Status: StatusOK, IOPerformance: "not-applicable", Init: s.initialization(v, now)}
	if v.State == VolumeCreating {
		st.Status = StatusInsufficientData
	}
	switch v.Type {
	case "io1", "io2", "gp3":
		st.IOPerformance = "normal"
	}
	return st
}

var volumeStatusFields = fields[VolumeStatus]{
	"availability-zone":    func(st *VolumeStatus) []string { return []string{st.Zone} },
	"volume-status.status": func(st *VolumeStatus) []string { return []string{st.Status} },
	"volume-status.details-name": func(st *VolumeStatus) []string {
		if st.Init.Type != "" {
			return []string{"io-enabled", "io-performance", "initialization-state"}
		}
		return []string{"io-enabled", "io-performance"}
	},
	"volume-status.details-status": func(st *VolumeStatus) []string {
		return []string{"passed", st.IOPerformance, st.InitializationState()}
	},
	// fakecloud raises no volume events nor actions: these filters match nothing.
	"action.code":        noValues[VolumeStatus],
	"action.description": noValues[VolumeStatus],
	"action.event-id":    noValues[VolumeStatus],
	"event.description":  noValues[VolumeStatus],
	"event.event-id":     noValues[VolumeStatus],
	"event.event-type":   noValues[VolumeStatus],
	"event.not-after":    noValues[VolumeStatus],
	"event.not-before":   noValues[VolumeStatus],
}

// DescribeVolumeStatus lists volumes' status checks and initialization, by ID or filter, a page at a time.
func (s *State) DescribeVolumeStatus(in DescribeInput) ([]VolumeStatus, string, error) {
	var (
		out  []VolumeStatus
		next string
		err  error
	)
	s.read(func(now time.Time) {
		var match func(*VolumeStatus) bool
		if match, err = volumeStatusFields.compile(in.Filters, func(*VolumeStatus) []Tag { return nil }); err != nil {
			return
		}
		matches := func(id string) (VolumeStatus, bool) {
			st := s.volumeStatus(s.volumes[id], now)
			return st, match(&st)
		}
		var ids []string
		if len(in.IDs) > 0 {
			if ids, err = s.knownIDs(in.IDs, "vol", ec2err.CodeInvalidVolumeIDMalformed, ec2err.CodeInvalidVolumeNotFound, "volume",
				func(id string) bool { _, ok := s.volumes[id]; return ok }); err != nil {
				return
			}
			if _, err = statusPages.pageSize(in.Page, true); err != nil {
				return
			}
		} else if ids, next, err = statusPages.page(&s.volumeIDs, in.Page, false, func(id string) bool { _, ok := matches(id); return ok }); err != nil {
			return
		}
		for _, id := range ids {
			if st, ok := matches(id); ok {
				out = append(out, st)
			}
		}
	})
	return out, next, err
}
