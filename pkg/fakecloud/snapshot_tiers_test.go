package fakecloud_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func tierStatus(t *testing.T, c *ec2.Client, id string) types.SnapshotTierStatus {
	t.Helper()
	out, err := c.DescribeSnapshotTierStatus(context.Background(), &ec2.DescribeSnapshotTierStatusInput{
		Filters: []types.Filter{{Name: aws.String("snapshot-id"), Values: []string{id}}}})
	if err != nil || len(out.SnapshotTierStatuses) != 1 {
		t.Fatalf("DescribeSnapshotTierStatus %s: %+v %v", id, out, err)
	}
	return out.SnapshotTierStatuses[0]
}

// inTier checks that DescribeSnapshots' storage-tier filter finds the snapshot in tier and not in the other.
func inTier(t *testing.T, c *ec2.Client, tier types.StorageTier, id string) {
	t.Helper()
	for _, asked := range []types.StorageTier{types.StorageTierArchive, types.StorageTierStandard} {
		out, err := c.DescribeSnapshots(context.Background(), &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"},
			Filters: []types.Filter{{Name: aws.String("storage-tier"), Values: []string{string(asked)}}}})
		if err != nil {
			t.Fatalf("DescribeSnapshots storage-tier=%s: %v", asked, err)
		}
		found := slices.ContainsFunc(out.Snapshots, func(sn types.Snapshot) bool { return aws.ToString(sn.SnapshotId) == id })
		if found != (asked == tier) {
			t.Errorf("storage-tier=%s finds %s: %v, but it is in %s", asked, id, found, tier)
		}
	}
}

// TestSnapshotTiers: ModifySnapshotTier archives a completed snapshot (archival-in-progress for the snapshot
// duration, then the archive tier), from which no volume or copy can be made until RestoreSnapshotTier brings
// it back, for some days (restoreExpiryTime, then archived again) or for good; the state survives a restart
// and errors are checked before DryRun.
func TestSnapshotTiers(t *testing.T) {
	clock := testutil.NewClock()
	opts := fakecloudtest.Options{DataDir: t.TempDir(), Clock: clock, Durations: state.Durations{Snapshot: time.Hour}}
	env := fakecloudtest.Start(t, opts)
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.SnapshotId)
	if _, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: &id, StorageTier: types.TargetStorageTierArchive}); codeOf(err) != "IncorrectState" {
		t.Errorf("archive of a pending snapshot: %v", err)
	}
	clock.Advance(time.Hour)
	waitSnapshot(t, c, id, types.SnapshotStateCompleted)

	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"restore of a standard snapshot", func() error {
			_, err := c.RestoreSnapshotTier(ctx, &ec2.RestoreSnapshotTierInput{SnapshotId: &id, PermanentRestore: aws.Bool(true)})
			return err
		}, "IncorrectState"},
		{"bad tier", func() error {
			_, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: &id, StorageTier: "glacier"})
			return err
		}, "InvalidParameterValue"},
		{"unknown", func() error {
			_, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: aws.String("snap-0123456789abcdef0")})
			return err
		}, "InvalidSnapshot.NotFound"},
		{"dry run", func() error {
			_, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: &id, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"describe dry run", func() error {
			_, err := c.DescribeSnapshotTierStatus(ctx, &ec2.DescribeSnapshotTierStatusInput{DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
	} {
		if err := tc.call(); codeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if st := tierStatus(t, c, id); st.StorageTier != types.StorageTierStandard || st.LastTieringOperationStatus != "" {
		t.Fatalf("before archival: %+v", st)
	}

	mod, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: &id, StorageTier: types.TargetStorageTierArchive})
	if err != nil || !aws.ToTime(mod.TieringStartTime).Equal(clock.Now()) {
		t.Fatalf("ModifySnapshotTier: %+v %v", mod, err)
	}
	if st := tierStatus(t, c, id); st.StorageTier != types.StorageTierStandard || st.LastTieringOperationStatus != types.TieringOperationStatusArchivalInProgress {
		t.Errorf("archiving: %+v", st)
	}
	inTier(t, c, types.StorageTierStandard, id)
	if _, err := c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: &id}); codeOf(err) != "IncorrectState" {
		t.Errorf("archive while archiving: %v", err)
	}
	clock.Advance(time.Hour)
	env.Close()
	env = fakecloudtest.Start(t, opts)
	c = env.EC2(t)
	if st := tierStatus(t, c, id); st.StorageTier != types.StorageTierArchive || st.LastTieringOperationStatus != types.TieringOperationStatusArchivalCompleted || st.ArchivalCompleteTime == nil {
		t.Errorf("archived, after a restart: %+v", st)
	}
	snaps, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
	if err != nil || snaps.Snapshots[0].StorageTier != types.StorageTierArchive {
		t.Errorf("DescribeSnapshots storageTier: %+v %v", snaps, err)
	}
	inTier(t, c, types.StorageTierArchive, id)
	if _, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), SnapshotId: &id}); codeOf(err) != "IncorrectState" {
		t.Errorf("volume from an archived snapshot: %v", err)
	}
	if _, err := c.CopySnapshot(ctx, &ec2.CopySnapshotInput{SourceSnapshotId: &id, SourceRegion: aws.String("us-east-1")}); codeOf(err) != "IncorrectState" {
		t.Errorf("copy of an archived snapshot: %v", err)
	}
	for _, tc := range []struct {
		name string
		in   ec2.RestoreSnapshotTierInput
		code string
	}{
		{"neither", ec2.RestoreSnapshotTierInput{SnapshotId: &id}, "MissingParameter"},
		{"both", ec2.RestoreSnapshotTierInput{SnapshotId: &id, PermanentRestore: aws.Bool(true), TemporaryRestoreDays: aws.Int32(1)}, "InvalidParameterCombination"},
		{"too many days", ec2.RestoreSnapshotTierInput{SnapshotId: &id, TemporaryRestoreDays: aws.Int32(181)}, "InvalidParameterValue"},
		{"dry run", ec2.RestoreSnapshotTierInput{SnapshotId: &id, TemporaryRestoreDays: aws.Int32(1), DryRun: aws.Bool(true)}, "DryRunOperation"},
	} {
		if _, err := c.RestoreSnapshotTier(ctx, &tc.in); codeOf(err) != tc.code {
			t.Errorf("restore %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	res, err := c.RestoreSnapshotTier(ctx, &ec2.RestoreSnapshotTierInput{SnapshotId: &id, TemporaryRestoreDays: aws.Int32(2)})
	if err != nil || aws.ToInt32(res.RestoreDuration) != 2 || aws.ToBool(res.IsPermanentRestore) {
		t.Fatalf("temporary restore: %+v %v", res, err)
	}
	snaps, err = c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
	if err != nil || snaps.Snapshots[0].StorageTier != types.StorageTierStandard || !aws.ToTime(snaps.Snapshots[0].RestoreExpiryTime).Equal(clock.Now().Add(48*time.Hour)) {
		t.Errorf("temporarily restored: %+v %v", snaps.Snapshots, err)
	}
	inTier(t, c, types.StorageTierStandard, id)
	availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &id})
	clock.Advance(49 * time.Hour)
	if st := tierStatus(t, c, id); st.StorageTier != types.StorageTierArchive {
		t.Errorf("temporary restore past its expiry: %+v", st)
	}
	inTier(t, c, types.StorageTierArchive, id)
	if _, err := c.RestoreSnapshotTier(ctx, &ec2.RestoreSnapshotTierInput{SnapshotId: &id, PermanentRestore: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if st := tierStatus(t, c, id); st.StorageTier != types.StorageTierStandard || st.LastTieringOperationStatus != types.TieringOperationStatusPermanentRestoreCompleted {
		t.Errorf("permanently restored: %+v", st)
	}
	availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &id})
}
