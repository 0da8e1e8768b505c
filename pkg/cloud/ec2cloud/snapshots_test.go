package ec2cloud

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func TestSnapshotLifecycle(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{Snapshot: 100 * time.Millisecond}},
		func(o *Options) { o.ClusterID = "c1" })
	d := e.mustCreate(t, "pvc-src", cloud.DiskOptions{SizeGiB: 2})
	s, err := e.CreateSnapshot(testCtx(t), "snapshot-1", d.ID, cloud.SnapshotOptions{Description: "first", Tags: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "snapshot-1" || s.SourceVolumeID != d.ID || s.SizeGiB != 2 || s.ReadyToUse || s.State != cloud.SnapshotPending ||
		s.Tags["k"] != "v" || s.Tags[cloud.TagClusterID] != "c1" {
		t.Errorf("new snapshot = %+v", s)
	}
	again, err := e.CreateSnapshot(testCtx(t), "snapshot-1", d.ID, cloud.SnapshotOptions{})
	if err != nil || again.ID != s.ID {
		t.Fatalf("same name again = %+v, %v; want %s", again, err, s.ID)
	}
	other := e.mustCreate(t, "pvc-other", cloud.DiskOptions{})
	_, err = e.CreateSnapshot(testCtx(t), "snapshot-1", other.ID, cloud.SnapshotOptions{})
	wantKinds(t, err, cloud.ErrAlreadyExists)

	done, err := e.WaitForSnapshot(testCtx(t), s.ID)
	if err != nil || !done.ReadyToUse || done.Progress != 100 || done.State != cloud.SnapshotCompleted {
		t.Fatalf("WaitForSnapshot = %+v, %v", done, err)
	}
	for what, get := range map[string]func() (*cloud.Snapshot, error){
		"GetSnapshot":       func() (*cloud.Snapshot, error) { return e.GetSnapshot(testCtx(t), s.ID) },
		"GetSnapshotByName": func() (*cloud.Snapshot, error) { return e.GetSnapshotByName(testCtx(t), "snapshot-1") },
	} {
		if got, err := get(); err != nil || got.ID != s.ID || !got.ReadyToUse {
			t.Errorf("%s = %+v, %v", what, got, err)
		}
	}

	restored := e.mustCreate(t, "pvc-restored", cloud.DiskOptions{SnapshotID: s.ID})
	if restored.SnapshotID != s.ID || restored.SizeGiB != 2 {
		t.Errorf("restored disk = %+v", restored)
	}

	if err := e.DeleteSnapshot(testCtx(t), s.ID); err != nil {
		t.Fatal(err)
	}
	wantKinds(t, e.DeleteSnapshot(testCtx(t), s.ID), cloud.ErrNotFound)
	_, err = e.GetSnapshot(testCtx(t), s.ID)
	wantKinds(t, err, cloud.ErrNotFound)
	_, err = e.GetSnapshotByName(testCtx(t), "snapshot-1")
	wantKinds(t, err, cloud.ErrNotFound)
}

func TestListSnapshots(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d1 := e.mustCreate(t, "pvc-l1", cloud.DiskOptions{})
	d2 := e.mustCreate(t, "pvc-l2", cloud.DiskOptions{})
	byVolume := map[string]map[string]bool{d1.ID: {}, d2.ID: {}}
	for i := range 7 {
		src := d1.ID
		if i%3 == 0 {
			src = d2.ID
		}
		s, err := e.CreateSnapshot(testCtx(t), fmt.Sprintf("snap-list-%d", i), src, cloud.SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		byVolume[src][s.ID] = true
	}
	// A snapshot without a CSI name is not listed.
	if _, err := e.raw(t).CreateSnapshot(testCtx(t), &ec2.CreateSnapshotInput{VolumeId: &d1.ID}); err != nil {
		t.Fatal(err)
	}
	list := func(volumeID string, size int32) map[string]bool {
		got := map[string]bool{}
		opts := cloud.SnapshotListOptions{SourceVolumeID: volumeID, Page: cloud.PageRequest{MaxResults: size}}
		for range 20 {
			page, err := e.ListSnapshots(testCtx(t), opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range page.Snapshots {
				got[s.ID] = true
			}
			if page.NextToken == "" {
				break
			}
			opts.Page.NextToken = page.NextToken
		}
		return got
	}
	all := map[string]bool{}
	for id := range byVolume[d1.ID] {
		all[id] = true
	}
	for id := range byVolume[d2.ID] {
		all[id] = true
	}
	for _, size := range []int32{0, 2, 6} {
		if got := list("", size); fmt.Sprint(got) != fmt.Sprint(all) {
			t.Errorf("page %d: listed %v, want %v", size, got, all)
		}
	}
	if got := list(d2.ID, 1); fmt.Sprint(got) != fmt.Sprint(byVolume[d2.ID]) {
		t.Errorf("by volume: listed %v, want %v", got, byVolume[d2.ID])
	}
}

// TestCreateSnapshotAfterLostReply: CreateSnapshot has no idempotency token. fakecloud makes the snapshot and
// answers InternalError; the SDK must not replay it, and the lookup by name finds the one that was made.
func TestCreateSnapshotAfterLostReply(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-snap-lost", cloud.DiskOptions{})
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateSnapshot": {Rate: 1, Code: "InternalError", Count: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	s, err := e.CreateSnapshot(testCtx(t), "snap-lost", d.ID, cloud.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.raw(t).DescribeSnapshots(testCtx(t), &ec2.DescribeSnapshotsInput{})
	if err != nil || len(out.Snapshots) != 1 || *out.Snapshots[0].SnapshotId != s.ID {
		t.Fatalf("fakecloud snapshots %+v, %v; want just %s", out, err, s.ID)
	}
	if calls := e.calls(t); calls["CreateSnapshot"] != 1 {
		t.Errorf("CreateSnapshot called %v times, want 1 (no blind replay)", calls["CreateSnapshot"])
	}
}

// TestCreateSnapshotRetriesWhenNothingWasMade: a 5xx before anything happened is retried after the lookup
// finds no snapshot.
func TestCreateSnapshotRetriesWhenNothingWasMade(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-snap-retry", cloud.DiskOptions{})
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateSnapshot": {Rate: 1, Code: "InternalError", Count: 2, Before: true},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateSnapshot(testCtx(t), "snap-retry", d.ID, cloud.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if calls := e.calls(t); calls["CreateSnapshot"] != 3 || calls["CreateSnapshot/Success"] != 1 {
		t.Errorf("CreateSnapshot calls: %v", calls)
	}
}

func TestSnapshotErrors(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Stuck: []string{faults.TransitionSnapshot}}})
	_, err := e.CreateSnapshot(testCtx(t), "snap-none", "vol-0123456789abcdef0", cloud.SnapshotOptions{})
	wantKinds(t, err, cloud.ErrNotFound)
	_, err = e.CreateSnapshot(testCtx(t), "", "vol-0123456789abcdef0", cloud.SnapshotOptions{})
	wantKinds(t, err, cloud.ErrInvalidArgument)

	d := e.mustCreate(t, "pvc-snap-stuck", cloud.DiskOptions{})
	s, err := e.CreateSnapshot(testCtx(t), "snap-stuck", d.ID, cloud.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.WaitForSnapshot(ctxTimeout(t, 300*time.Millisecond), s.ID)
	if !isDeadline(err) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("WaitForSnapshot = %v, want a deadline error naming the state", err)
	}
	wantKinds(t, e.DeleteSnapshot(testCtx(t), "snap-0123456789abcdef0"), cloud.ErrNotFound)
}
