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
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

const zoneC = "us-east-1c"

// fsrDurations make each fast snapshot restore state last an hour of the test's clock, so every state is seen.
var fsrDurations = state.Durations{FSREnabling: time.Hour, FSROptimizing: time.Hour, FSRDisabling: time.Hour}

// completedSnapshot snapshots a new 1 GiB volume in zone A and waits until the snapshot is completed.
func completedSnapshot(t *testing.T, c *ec2.Client) string {
	t.Helper()
	src := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3})
	out, err := c.CreateSnapshot(context.Background(), &ec2.CreateSnapshotInput{VolumeId: &src})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	id := aws.ToString(out.SnapshotId)
	waitSnapshot(t, c, id, types.SnapshotStateCompleted)
	return id
}

// fastRestoreStates maps "snapshot/zone" to the state DescribeFastSnapshotRestores reports.
func fastRestoreStates(t *testing.T, c *ec2.Client, filters ...types.Filter) map[string]types.DescribeFastSnapshotRestoreSuccessItem {
	t.Helper()
	out, err := c.DescribeFastSnapshotRestores(context.Background(), &ec2.DescribeFastSnapshotRestoresInput{Filters: filters})
	if err != nil {
		t.Fatalf("DescribeFastSnapshotRestores: %v", err)
	}
	m := map[string]types.DescribeFastSnapshotRestoreSuccessItem{}
	for _, f := range out.FastSnapshotRestores {
		m[aws.ToString(f.SnapshotId)+"/"+aws.ToString(f.AvailabilityZone)] = f
	}
	return m
}

func volumeStatus(t *testing.T, c *ec2.Client, id string) types.VolumeStatusItem {
	t.Helper()
	out, err := c.DescribeVolumeStatus(context.Background(), &ec2.DescribeVolumeStatusInput{VolumeIds: []string{id}})
	if err != nil {
		t.Fatalf("DescribeVolumeStatus %s: %v", id, err)
	}
	if len(out.VolumeStatuses) != 1 {
		t.Fatalf("DescribeVolumeStatus %s: %d items", id, len(out.VolumeStatuses))
	}
	return out.VolumeStatuses[0]
}

// initState is a volume status item's initialization-state detail, "" when it has none.
func initState(st types.VolumeStatusItem) string {
	for _, d := range st.VolumeStatus.Details {
		if d.Name == types.VolumeStatusNameInitializationState {
			return aws.ToString(d.Status)
		}
	}
	return ""
}

// TestFastSnapshotRestores: through the real SDK, EnableFastSnapshotRestores answers per snapshot and zone
// (unknown snapshots and zones refused, the rest enabling), the state moves enabling → optimizing → enabled
// with its times, a restore in an enabled zone is fastRestored unless it asks for a rate, and Disable moves it
// disabling → disabled; DescribeFastSnapshotRestores filters and pages; all of it survives a restart.
func TestFastSnapshotRestores(t *testing.T) {
	dir := t.TempDir()
	clock := testutil.NewClock()
	opts := fakecloudtest.Options{DataDir: dir, Clock: clock, Durations: fsrDurations}
	env := fakecloudtest.Start(t, opts)
	c := env.EC2(t)
	ctx := context.Background()
	snap := completedSnapshot(t, c)
	const missing = "snap-0123456789abcdef0"

	en, err := c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{
		AvailabilityZones: []string{zoneA, zoneB, "us-east-1z"}, SourceSnapshotIds: []string{snap, missing}})
	if err != nil {
		t.Fatalf("EnableFastSnapshotRestores: %v", err)
	}
	if len(en.Successful) != 2 {
		t.Fatalf("successful: %+v, want zones A and B", en.Successful)
	}
	for _, s := range en.Successful {
		if aws.ToString(s.SnapshotId) != snap || s.State != types.FastSnapshotRestoreStateCodeEnabling || s.EnablingTime == nil ||
			aws.ToString(s.OwnerId) == "" || aws.ToString(s.AvailabilityZoneId) == "" {
			t.Errorf("successful item %+v: want %s enabling with its enabling time, owner and zone ID", s, snap)
		}
	}
	codes := map[string]string{}
	for _, u := range en.Unsuccessful {
		for _, e := range u.FastSnapshotRestoreStateErrors {
			codes[aws.ToString(u.SnapshotId)+"/"+aws.ToString(e.AvailabilityZone)] = aws.ToString(e.Error.Code)
		}
	}
	wantCodes := map[string]string{
		snap + "/us-east-1z":  "InvalidParameterValue",
		missing + "/" + zoneA: "InvalidSnapshot.NotFound", missing + "/" + zoneB: "InvalidSnapshot.NotFound",
		missing + "/us-east-1z": "InvalidSnapshot.NotFound",
	}
	if len(codes) != len(wantCodes) {
		t.Errorf("unsuccessful %v, want %v", codes, wantCodes)
	}
	for k, want := range wantCodes {
		if codes[k] != want {
			t.Errorf("unsuccessful %s: %q, want %q", k, codes[k], want)
		}
	}

	steps := []struct {
		advance time.Duration
		want    types.FastSnapshotRestoreStateCode
		stamp   func(types.DescribeFastSnapshotRestoreSuccessItem) *time.Time
	}{
		{0, types.FastSnapshotRestoreStateCodeEnabling, func(f types.DescribeFastSnapshotRestoreSuccessItem) *time.Time { return f.EnablingTime }},
		{time.Hour, types.FastSnapshotRestoreStateCodeOptimizing, func(f types.DescribeFastSnapshotRestoreSuccessItem) *time.Time { return f.OptimizingTime }},
		{time.Hour, types.FastSnapshotRestoreStateCodeEnabled, func(f types.DescribeFastSnapshotRestoreSuccessItem) *time.Time { return f.EnabledTime }},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		got := fastRestoreStates(t, c, types.Filter{Name: aws.String("snapshot-id"), Values: []string{snap}})
		if len(got) != 2 {
			t.Fatalf("%s: %d fast snapshot restores, want 2", st.want, len(got))
		}
		for k, f := range got {
			if f.State != st.want || st.stamp(f) == nil || !st.stamp(f).Equal(clock.Now()) {
				t.Errorf("%s: %s, stamp %v; want %s at %v", k, f.State, st.stamp(f), st.want, clock.Now())
			}
		}
	}
	if got := fastRestoreStates(t, c, types.Filter{Name: aws.String("availability-zone"), Values: []string{zoneB}},
		types.Filter{Name: aws.String("state"), Values: []string{"enabled"}}); len(got) != 1 {
		t.Errorf("filtered by zone B and enabled: %v", got)
	}

	// Restores: fast in an enabled zone, not in zone C, nor when a rate is asked (a rate wins).
	restore := func(zone string, rate *int32) string {
		out := createVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap, AvailabilityZone: aws.String(zone), VolumeInitializationRate: rate})
		if aws.ToInt32(out.VolumeInitializationRate) != aws.ToInt32(rate) {
			t.Errorf("CreateVolume echoed rate %v, want %v", out.VolumeInitializationRate, rate)
		}
		return aws.ToString(out.VolumeId)
	}
	fast, slow, rated := restore(zoneA, nil), restore(zoneC, nil), restore(zoneB, aws.Int32(200))
	for _, tc := range []struct {
		id   string
		fast bool
		rate int32
	}{{fast, true, 0}, {slow, false, 0}, {rated, false, 200}} {
		v := waitVolume(t, c, tc.id, types.VolumeStateAvailable)
		if aws.ToBool(v.FastRestored) != tc.fast || aws.ToInt32(v.VolumeInitializationRate) != tc.rate {
			t.Errorf("%s: fastRestored %v rate %v, want %v %d", tc.id, v.FastRestored, v.VolumeInitializationRate, tc.fast, tc.rate)
		}
	}

	// Pages of one.
	var pages, items int
	p := ec2.NewDescribeFastSnapshotRestoresPaginator(c, &ec2.DescribeFastSnapshotRestoresInput{MaxResults: aws.Int32(1)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		items += len(out.FastSnapshotRestores)
	}
	if pages != 2 || items != 2 {
		t.Errorf("%d pages of %d items, want 2 of 1", pages, items)
	}

	dis, err := c.DisableFastSnapshotRestores(ctx, &ec2.DisableFastSnapshotRestoresInput{
		AvailabilityZones: []string{zoneA}, SourceSnapshotIds: []string{snap}})
	if err != nil || len(dis.Successful) != 1 || dis.Successful[0].State != types.FastSnapshotRestoreStateCodeDisabling ||
		dis.Successful[0].DisablingTime == nil || len(dis.Unsuccessful) != 0 {
		t.Fatalf("DisableFastSnapshotRestores: %+v, %v; want zone A disabling", dis, err)
	}
	clock.Advance(time.Hour)
	if f := fastRestoreStates(t, c)[snap+"/"+zoneA]; f.State != types.FastSnapshotRestoreStateCodeDisabled || f.DisabledTime == nil {
		t.Errorf("an hour after disabling: %+v, want disabled with its time", f)
	}
	if v := restore(zoneA, nil); aws.ToBool(waitVolume(t, c, v, types.VolumeStateAvailable).FastRestored) {
		t.Errorf("a restore in a zone whose fast snapshot restore is disabled is fastRestored")
	}

	// A restart keeps the fast snapshot restores and what the volumes were made with.
	env.Close()
	env = fakecloudtest.Start(t, opts)
	c = env.EC2(t)
	got := fastRestoreStates(t, c)
	if got[snap+"/"+zoneA].State != types.FastSnapshotRestoreStateCodeDisabled || got[snap+"/"+zoneB].State != types.FastSnapshotRestoreStateCodeEnabled {
		t.Errorf("after a restart: %v", got)
	}
	if v := describeVolume(t, c, fast); !aws.ToBool(v.FastRestored) {
		t.Errorf("after a restart %s is not fastRestored", fast)
	}
	if v := describeVolume(t, c, rated); aws.ToInt32(v.VolumeInitializationRate) != 200 {
		t.Errorf("after a restart %s has rate %v", rated, v.VolumeInitializationRate)
	}

	// Deleting the snapshot forgets its fast snapshot restores.
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &snap}); err != nil {
		t.Fatal(err)
	}
	if got := fastRestoreStates(t, c); len(got) != 0 {
		t.Errorf("after the snapshot's deletion: %v", got)
	}
}

// TestVolumeStatusInitialization: DescribeVolumeStatus reports, for each kind of volume, the initialization
// type, progress and (for a provisioned rate) time left that the test clock implies; an empty volume has none.
// The state's VolumeInitialization agrees, for the block layer.
func TestVolumeStatusInitialization(t *testing.T) {
	clock := testutil.NewClock()
	env := fakecloudtest.Start(t, fakecloudtest.Options{Clock: clock})
	c := env.EC2(t)
	ctx := context.Background()
	snap := completedSnapshot(t, c)
	if _, err := c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{
		AvailabilityZones: []string{zoneB}, SourceSnapshotIds: []string{snap}}); err != nil {
		t.Fatal(err)
	}
	fastRestoreStates(t, c) // zero durations: enabled by this read

	empty := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	fast := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap, AvailabilityZone: aws.String(zoneB)})
	def := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap})
	rated := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap, VolumeInitializationRate: aws.Int32(200)})
	cp, err := c.CopyVolumes(ctx, &ec2.CopyVolumesInput{SourceVolumeId: &empty})
	if err != nil {
		t.Fatal(err)
	}
	copied := aws.ToString(cp.Volumes[0].VolumeId)
	waitVolume(t, c, copied, types.VolumeStateAvailable)

	// 1 GiB: 200 MiB/s takes 5.12 s, the default 64 MiB/s 16 s.
	type want struct {
		typ      types.InitializationType
		progress int64
		eta      *int64
		state    string
	}
	steps := []struct {
		advance time.Duration
		want    map[string]want
	}{
		{0, map[string]want{
			empty: {}, fast: {types.InitializationTypeDefault, 100, nil, "completed"},
			def: {types.InitializationTypeDefault, 0, nil, "initializing"}, rated: {types.InitializationTypeProvisionedRate, 0, aws.Int64(6), "initializing"},
			copied: {types.InitializationTypeVolumeCopy, 0, nil, "initializing"},
		}},
		{3 * time.Second, map[string]want{
			def:   {types.InitializationTypeDefault, 18, nil, "initializing"},
			rated: {types.InitializationTypeProvisionedRate, 58, aws.Int64(3), "initializing"},
		}},
		{3 * time.Second, map[string]want{
			rated: {types.InitializationTypeProvisionedRate, 100, aws.Int64(0), "completed"},
		}},
		{10 * time.Second, map[string]want{
			def:    {types.InitializationTypeDefault, 100, nil, "completed"},
			copied: {types.InitializationTypeVolumeCopy, 100, nil, "completed"},
		}},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		for id, w := range st.want {
			item := volumeStatus(t, c, id)
			if item.VolumeStatus == nil || item.VolumeStatus.Status != types.VolumeStatusInfoStatusOk || aws.ToString(item.AvailabilityZone) == "" {
				t.Errorf("+%v %s: status %+v", st.advance, id, item.VolumeStatus)
			}
			d := item.InitializationStatusDetails
			if w.typ == "" {
				if d != nil || initState(item) != "" {
					t.Errorf("+%v %s (empty): initialization %+v, state %q; want none", st.advance, id, d, initState(item))
				}
				continue
			}
			if d == nil || d.InitializationType != w.typ || aws.ToInt64(d.Progress) != w.progress || initState(item) != w.state ||
				(w.eta == nil) != (d.EstimatedTimeToCompleteInSeconds == nil) || aws.ToInt64(d.EstimatedTimeToCompleteInSeconds) != aws.ToInt64(w.eta) {
				t.Errorf("+%v %s: %+v, state %q; want %+v", st.advance, id, d, initState(item), w)
			}
			in, err := env.Server.State.VolumeInitialization(id)
			if err != nil || in.Type != string(w.typ) || in.Progress() != w.progress || in.Done() != (w.progress == 100) {
				t.Errorf("+%v %s: VolumeInitialization %+v, %v", st.advance, id, in, err)
			}
		}
	}

	// Filters and pages: all five are ok; only the restores and the copy have an initialization-state.
	out, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{Filters: []types.Filter{
		{Name: aws.String("volume-status.details-name"), Values: []string{"initialization-state"}}}})
	if err != nil || len(out.VolumeStatuses) != 4 {
		t.Errorf("filtered by initialization-state: %d items, %v; want 4", len(out.VolumeStatuses), err)
	}
	var items int
	p := ec2.NewDescribeVolumeStatusPaginator(c, &ec2.DescribeVolumeStatusInput{MaxResults: aws.Int32(5),
		Filters: []types.Filter{{Name: aws.String("volume-status.status"), Values: []string{"ok"}}}})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		items += len(page.VolumeStatuses)
	}
	if items != 6 {
		t.Errorf("paged: %d items, want the six volumes", items)
	}
}

// TestFastSnapshotRestoresRefused: bad input is refused with EC2's codes, and nothing changes.
func TestFastSnapshotRestoresRefused(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	snap := completedSnapshot(t, c)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	tests := []struct {
		name string
		call func() error
		code string
	}{
		{"rate without a snapshot", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1), VolumeInitializationRate: aws.Int32(200)})
			return err
		}, "InvalidParameterCombination"},
		{"rate below 100", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), SnapshotId: &snap, VolumeInitializationRate: aws.Int32(99)})
			return err
		}, "InvalidParameterValue"},
		{"rate above 300", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), SnapshotId: &snap, VolumeInitializationRate: aws.Int32(301)})
			return err
		}, "InvalidParameterValue"},
		{"rate of an unknown snapshot", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), SnapshotId: aws.String("snap-0123456789abcdef0"),
				VolumeInitializationRate: aws.Int32(200)})
			return err
		}, "InvalidSnapshot.NotFound"},
		{"enable a malformed snapshot", func() error {
			_, err := c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{AvailabilityZones: []string{zoneA}, SourceSnapshotIds: []string{"vol-1"}})
			return err
		}, "InvalidSnapshotID.Malformed"},
		{"enable, dry run", func() error {
			_, err := c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{AvailabilityZones: []string{zoneA},
				SourceSnapshotIds: []string{snap}, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"disable, dry run", func() error {
			_, err := c.DisableFastSnapshotRestores(ctx, &ec2.DisableFastSnapshotRestoresInput{AvailabilityZones: []string{zoneA},
				SourceSnapshotIds: []string{snap}, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"describe fast snapshot restores, unknown filter", func() error {
			_, err := c.DescribeFastSnapshotRestores(ctx, &ec2.DescribeFastSnapshotRestoresInput{Filters: []types.Filter{
				{Name: aws.String("volume-id"), Values: []string{vol}}}})
			return err
		}, "InvalidParameterValue"},
		{"describe fast snapshot restores, bad token", func() error {
			_, err := c.DescribeFastSnapshotRestores(ctx, &ec2.DescribeFastSnapshotRestoresInput{NextToken: aws.String("!!")})
			return err
		}, "InvalidPaginationToken"},
		{"volume status of an unknown volume", func() error {
			_, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{vol, "vol-0123456789abcdef0"}})
			return err
		}, "InvalidVolume.NotFound"},
		{"volume status, IDs and a page size", func() error {
			_, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{vol}, MaxResults: aws.Int32(5)})
			return err
		}, "InvalidParameterCombination"},
		{"volume status, page too small", func() error {
			_, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{MaxResults: aws.Int32(4)})
			return err
		}, "InvalidParameterValue"},
		{"volume status, dry run", func() error {
			_, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
	}
	for _, tc := range tests {
		if err := tc.call(); codeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if got := fastRestoreStates(t, c); len(got) != 0 {
		t.Errorf("fast snapshot restores after the refusals: %v", got)
	}
	out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil || len(out.Volumes) != 2 {
		t.Errorf("%d volumes after the refusals (%v), want the snapshot's source and one more", len(out.Volumes), err)
	}
}
