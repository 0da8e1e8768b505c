package state

import (
	"fmt"
	"time"

	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// Durations are how long each asynchronous transition takes. Zero means the next read sees it done.
type Durations struct {
	VolumeCreate time.Duration `json:"volumeCreate"`
	VolumeDelete time.Duration `json:"volumeDelete"`
	Attach       time.Duration `json:"attach"`
	Detach       time.Duration `json:"detach"`
	Modifying    time.Duration `json:"modifying"`
	Optimizing   time.Duration `json:"optimizing"`
	Snapshot     time.Duration `json:"snapshot"`
	// Instance transitions: pending → running, stopping → stopped, shutting-down → terminated.
	InstanceStart     time.Duration `json:"instanceStart"`
	InstanceStop      time.Duration `json:"instanceStop"`
	InstanceTerminate time.Duration `json:"instanceTerminate"`
	// Fast snapshot restore transitions: enabling → optimizing → enabled, and disabling → disabled.
	FSREnabling   time.Duration `json:"fsrEnabling"`
	FSROptimizing time.Duration `json:"fsrOptimizing"`
	FSRDisabling  time.Duration `json:"fsrDisabling"`
}

// DefaultDurations are short, like a fast cloud on a good day.
func DefaultDurations() Durations {
	return Durations{
		VolumeCreate: 500 * time.Millisecond,
		VolumeDelete: 500 * time.Millisecond,
		Attach:       500 * time.Millisecond,
		Detach:       500 * time.Millisecond,
		Modifying:    500 * time.Millisecond,
		Optimizing:   time.Second,
		Snapshot:     time.Second,

		InstanceStart:     500 * time.Millisecond,
		InstanceStop:      500 * time.Millisecond,
		InstanceTerminate: 500 * time.Millisecond,

		FSREnabling:   500 * time.Millisecond,
		FSROptimizing: time.Second,
		FSRDisabling:  500 * time.Millisecond,
	}
}

// InstanceSpec describes an instance known at start or registered at run time.
type InstanceSpec struct {
	ID              string `json:"id"`
	Zone            string `json:"zone"`
	InstanceType    string `json:"instanceType,omitempty"`
	AttachmentLimit int    `json:"attachmentLimit,omitempty"`
	// NetworkInterfaces is how many network interfaces the instance has, the primary one's included (0: that
	// one alone). It does not change the attachment limit fakecloud enforces; the instance metadata lists them.
	NetworkInterfaces int `json:"networkInterfaces,omitempty"`
}

// Config is the cloud's shape: its region, zones, instances and timings.
type Config struct {
	Region    string
	AccountID string
	Zones     []Zone
	Instances []InstanceSpec
	Durations Durations
	// ModificationLimit modifications per ModificationWindow per volume; 0 means no limit.
	ModificationLimit  int
	ModificationWindow time.Duration
	// DefaultAttachmentLimit, when set, replaces the instance type's limit for instances that name none.
	DefaultAttachmentLimit int
	// ClientTokenRetention is how long a deleted volume's ClientToken still answers that volume (tokens.go); 0
	// forgets it with the volume.
	ClientTokenRetention time.Duration
	// TerminatedRetention is how long a terminated instance stays visible (DescribeInstances, in state
	// terminated) before it vanishes; 0 forgets it once terminated.
	TerminatedRetention time.Duration
	// RestoreInitRate is the rate, in MiB/s, at which a volume restored from a snapshot without a provisioned
	// rate or fast snapshot restore, or copied from another volume, initializes in the background (EBS's
	// default rate, which EBS does not state); 0 initializes such volumes at once.
	RestoreInitRate int32
	// VcpuLimit is the account's On-Demand vCPU quota: RunInstances launches only while the vCPUs of the
	// instances not stopped or terminated (registered ones included) stay within it. 0 is DefaultVcpuLimit.
	VcpuLimit int
}

// DefaultVcpuLimit bounds what RunInstances launches: room for many small test instances, and a bound on what one
// request with a huge MaxCount makes. EC2's quotas vary by account; this one is chosen.
const DefaultVcpuLimit = 256

// DefaultTerminatedRetention is EC2's: a terminated instance stays visible for about an hour.
const DefaultTerminatedRetention = time.Hour

// DefaultRestoreInitRate is the background initialization rate of restores and copies, in MiB/s: below
// EBS's provisioned rates (100–300 MiB/s), which are sold as faster than the default.
const DefaultRestoreInitRate = 64

// DefaultClientTokenRetention keeps tokens a day: EC2's retention is not documented, and its idempotency
// tokens are commonly said to hold for hours at least.
const DefaultClientTokenRetention = 24 * time.Hour

// DefaultInstanceType is reported for instances registered without one.
const DefaultInstanceType = instancetypes.Default

func (c *Config) validate() error {
	if c.Region == "" {
		return fmt.Errorf("region is required")
	}
	if len(c.Zones) == 0 {
		return fmt.Errorf("at least one zone is required")
	}
	if c.AccountID == "" {
		c.AccountID = "123456789012"
	}
	if c.ModificationLimit > 0 && c.ModificationWindow <= 0 {
		return fmt.Errorf("a modification limit needs a positive window")
	}
	if c.ClientTokenRetention < 0 {
		return fmt.Errorf("a negative client token retention")
	}
	if c.RestoreInitRate < 0 {
		return fmt.Errorf("a negative restore initialization rate")
	}
	if c.VcpuLimit < 0 {
		return fmt.Errorf("a negative vCPU limit")
	}
	if c.VcpuLimit == 0 {
		c.VcpuLimit = DefaultVcpuLimit
	}
	if c.TerminatedRetention < 0 {
		return fmt.Errorf("a negative terminated instance retention")
	}
	for _, in := range c.Instances {
		if !c.hasZone(in.Zone) {
			return fmt.Errorf("instance %s is in unknown zone %q", in.ID, in.Zone)
		}
		if err := checkInstanceType(in.InstanceType); err != nil {
			return fmt.Errorf("instance %s: %w", in.ID, err)
		}
		if err := checkInterfaces(in.NetworkInterfaces); err != nil {
			return fmt.Errorf("instance %s: %w", in.ID, err)
		}
	}
	return nil
}

func (c *Config) hasZone(name string) bool {
	_, ok := c.zone(name)
	return ok
}

func (c *Config) zone(name string) (Zone, bool) {
	for _, z := range c.Zones {
		if z.Name == name {
			return z, true
		}
	}
	return Zone{}, false
}

func (c *Config) zoneByID(id string) (Zone, bool) {
	for _, z := range c.Zones {
		if z.ID == id {
			return z, true
		}
	}
	return Zone{}, false
}
