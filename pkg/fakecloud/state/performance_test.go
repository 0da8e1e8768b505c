package state

import (
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// TestVolumePerformance: a volume's performance follows ModifyVolume, from the moment it starts optimizing.
func TestVolumePerformance(t *testing.T) {
	c := newTestCloud(t)
	c.cfg.Durations.Modifying, c.cfg.Durations.Optimizing = time.Minute, time.Hour
	c.restart()
	size, iops := int32(10), int32(100)
	v, err := c.s.CreateVolume(CreateVolumeInput{SizeGiB: &size, VolumeType: "io2", Iops: &iops, Zone: "us-east-1a"})
	if err != nil {
		t.Fatal(err)
	}
	perf := func() Performance {
		t.Helper()
		p, err := c.s.VolumePerformance(v.ID)
		if err != nil {
			t.Fatalf("VolumePerformance: %v", err)
		}
		return p
	}
	if got, want := perf(), (Performance{Type: "io2", SizeGiB: 10, Iops: 100}); got != want {
		t.Fatalf("created: %+v, want %+v", got, want)
	}
	c.waitFor("volume available", func() bool { return c.volume(v.ID).State == VolumeAvailable })
	target, bigger := int32(1000), int32(20)
	if _, err := c.s.ModifyVolume(ModifyInput{VolumeID: v.ID, Iops: &target, SizeGiB: &bigger}); err != nil {
		t.Fatal(err)
	}
	if got := perf(); got.Iops != 100 {
		t.Fatalf("modifying: %+v, want the original 100 IOPS", got)
	}
	c.clock.Advance(time.Minute)
	// The file grows on a worker; the modification turns optimizing once it has.
	c.waitFor("optimizing", func() bool { return c.volume(v.ID).SizeGiB == bigger })
	if got, want := perf(), (Performance{Type: "io2", SizeGiB: 20, Iops: 1000}); got != want {
		t.Fatalf("optimizing: %+v, want %+v", got, want)
	}
	if _, err := c.s.VolumePerformance("vol-0123456789abcdef0"); !ec2err.HasCode(err, ec2err.CodeInvalidVolumeNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}
