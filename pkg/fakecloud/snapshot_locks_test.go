package fakecloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

func lockState(t *testing.T, c *ec2.Client, id string) types.LockState {
	t.Helper()
	out, err := c.DescribeLockedSnapshots(context.Background(), &ec2.DescribeLockedSnapshotsInput{SnapshotIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Snapshots) == 0 {
		return ""
	}
	return out.Snapshots[0].LockState
}

// TestSnapshotLocks: LockSnapshot in governance and compliance mode, as EC2 has them: a locked snapshot cannot
// be deleted until its lock expires or it is unlocked; governance unlocks at any time, compliance only within
// its cooling-off period, after which its lock can only be extended; DescribeLockedSnapshots lists and filters
// by lock state; the locks survive a restart; errors are checked before DryRun.
func TestSnapshotLocks(t *testing.T) {
	clock := testutil.NewClock()
	opts := fakecloudtest.Options{DataDir: t.TempDir(), Clock: clock}
	env := fakecloudtest.Start(t, opts)
	c := env.EC2(t)
	ctx := context.Background()
	gov, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, 0, 0)
	comp, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, 0, 0)
	free, _ := snapshotOfNewVolume(t, env, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}, 0, 0)

	for _, tc := range []struct {
		name string
		in   ec2.LockSnapshotInput
		code string
	}{
		{"bad mode", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: "forever", LockDuration: aws.Int32(1)}, "InvalidParameterValue"},
		{"no duration", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance}, "MissingParameter"},
		{"both durations", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(1), ExpirationDate: aws.Time(clock.Now().Add(48 * time.Hour))}, "InvalidParameterCombination"},
		{"zero days", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(0)}, "InvalidParameterValue"},
		{"too many days", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(36501)}, "InvalidParameterValue"},
		{"past expiry", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, ExpirationDate: aws.Time(clock.Now().Add(-time.Hour))}, "InvalidParameterValue"},
		{"cool-off in governance", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(1), CoolOffPeriod: aws.Int32(1)}, "InvalidParameterCombination"},
		{"cool-off too long", ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeCompliance, LockDuration: aws.Int32(1), CoolOffPeriod: aws.Int32(73)}, "InvalidParameterValue"},
		{"unknown", ec2.LockSnapshotInput{SnapshotId: aws.String("snap-0123456789abcdef0"), LockMode: types.LockModeGovernance, LockDuration: aws.Int32(1)}, "InvalidSnapshot.NotFound"},
		{"dry run", ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(1), DryRun: aws.Bool(true)}, "DryRunOperation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.LockSnapshot(ctx, &tc.in)
			if got := codeOf(err); got != tc.code {
				t.Errorf("LockSnapshot: code %q (%v), want %q", got, err, tc.code)
			}
		})
	}
	if got := lockState(t, c, gov); got != "" {
		t.Fatalf("refused locks locked the snapshot: %q", got)
	}

	g, err := c.LockSnapshot(ctx, &ec2.LockSnapshotInput{SnapshotId: &gov, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(2)})
	if err != nil || g.LockState != types.LockStateGovernance || aws.ToInt32(g.LockDuration) != 2 || !aws.ToTime(g.LockExpiresOn).Equal(clock.Now().Add(48*time.Hour)) {
		t.Fatalf("governance lock: %+v %v", g, err)
	}
	cl, err := c.LockSnapshot(ctx, &ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeCompliance,
		ExpirationDate: aws.Time(clock.Now().Add(10 * 24 * time.Hour)), CoolOffPeriod: aws.Int32(2)})
	if err != nil || cl.LockState != types.LockStateComplianceCooloff || aws.ToInt32(cl.CoolOffPeriod) != 2 ||
		!aws.ToTime(cl.CoolOffPeriodExpiresOn).Equal(clock.Now().Add(2*time.Hour)) {
		t.Fatalf("compliance lock: %+v %v", cl, err)
	}
	for _, id := range []string{gov, comp} {
		if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &id}); codeOf(err) != "IncorrectState" {
			t.Errorf("delete of locked %s: %v", id, err)
		}
		if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &id, DryRun: aws.Bool(true)}); codeOf(err) != "IncorrectState" {
			t.Errorf("dry-run delete of locked %s: %v", id, err)
		}
	}
	all, err := c.DescribeLockedSnapshots(ctx, &ec2.DescribeLockedSnapshotsInput{})
	if err != nil || len(all.Snapshots) != 2 {
		t.Fatalf("DescribeLockedSnapshots: %+v %v", all, err)
	}
	cooling, err := c.DescribeLockedSnapshots(ctx, &ec2.DescribeLockedSnapshotsInput{Filters: []types.Filter{{Name: aws.String("lock-state"), Values: []string{"compliance-cooloff"}}}})
	if err != nil || len(cooling.Snapshots) != 1 || aws.ToString(cooling.Snapshots[0].SnapshotId) != comp || aws.ToString(cooling.Snapshots[0].OwnerId) == "" {
		t.Errorf("filtered by lock-state: %+v %v", cooling, err)
	}
	if got, err := c.DescribeLockedSnapshots(ctx, &ec2.DescribeLockedSnapshotsInput{SnapshotIds: []string{free}}); err != nil || len(got.Snapshots) != 0 {
		t.Errorf("an unlocked snapshot listed: %+v %v", got, err)
	}
	if _, err := c.DescribeLockedSnapshots(ctx, &ec2.DescribeLockedSnapshotsInput{Filters: []types.Filter{{Name: aws.String("status"), Values: []string{"x"}}}}); codeOf(err) != "InvalidParameterValue" {
		t.Errorf("unknown filter: %v", err)
	}
	if _, err := c.UnlockSnapshot(ctx, &ec2.UnlockSnapshotInput{SnapshotId: &free}); codeOf(err) != "IncorrectState" {
		t.Errorf("unlock of an unlocked snapshot: %v", err)
	}
	if _, err := c.UnlockSnapshot(ctx, &ec2.UnlockSnapshotInput{SnapshotId: &gov, DryRun: aws.Bool(true)}); codeOf(err) != "DryRunOperation" {
		t.Errorf("dry-run unlock: %v", err)
	}

	// Past the cooling-off period, over a restart: compliance holds, only an extension is allowed.
	clock.Advance(3 * time.Hour)
	env.Close()
	env = fakecloudtest.Start(t, opts)
	c = env.EC2(t)
	if got := lockState(t, c, comp); got != types.LockStateCompliance {
		t.Fatalf("compliance lock after its cooling-off and a restart: %q", got)
	}
	if got := lockState(t, c, gov); got != types.LockStateGovernance {
		t.Fatalf("governance lock after a restart: %q", got)
	}
	if _, err := c.UnlockSnapshot(ctx, &ec2.UnlockSnapshotInput{SnapshotId: &comp}); codeOf(err) != "IncorrectState" {
		t.Errorf("unlock of compliance past cool-off: %v", err)
	}
	for _, tc := range []struct {
		name string
		in   ec2.LockSnapshotInput
		code string
	}{
		{"shorter", ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeCompliance, LockDuration: aws.Int32(1)}, "IncorrectState"},
		{"to governance", ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeGovernance, LockDuration: aws.Int32(30)}, "IncorrectState"},
		{"cool-off again", ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeCompliance, LockDuration: aws.Int32(30), CoolOffPeriod: aws.Int32(1)}, "InvalidParameterCombination"},
	} {
		if _, err := c.LockSnapshot(ctx, &tc.in); codeOf(err) != tc.code {
			t.Errorf("compliance lock changed %s: %v, want %s", tc.name, err, tc.code)
		}
	}
	ext, err := c.LockSnapshot(ctx, &ec2.LockSnapshotInput{SnapshotId: &comp, LockMode: types.LockModeCompliance, LockDuration: aws.Int32(30)})
	if err != nil || ext.LockState != types.LockStateCompliance || !aws.ToTime(ext.LockExpiresOn).Equal(clock.Now().Add(30*24*time.Hour)) {
		t.Errorf("extended compliance lock: %+v %v", ext, err)
	}

	// Governance unlocks; an expired lock no longer holds the snapshot.
	if _, err := c.UnlockSnapshot(ctx, &ec2.UnlockSnapshotInput{SnapshotId: &gov}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &gov}); err != nil {
		t.Errorf("delete after unlock: %v", err)
	}
	clock.Advance(31 * 24 * time.Hour)
	if got := lockState(t, c, comp); got != types.LockStateExpired {
		t.Errorf("lock past its expiry: %q", got)
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &comp}); err != nil {
		t.Errorf("delete after the lock expired: %v", err)
	}
}
