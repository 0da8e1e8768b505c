package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func TestCreateDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{}, func(o *Options) { o.ClusterID = "c1" })
	d, err := e.CreateDisk(testCtx(t), "pvc-1234", cloud.DiskOptions{
		Zone: zoneB, SizeGiB: 10, VolumeType: "gp3", IOPS: 4000, Throughput: 250, Encrypted: true,
		PVCName: "data", PVCNamespace: "db", PVName: "pvc-1234", Tags: map[string]string{"team": "storage", cloud.TagName: "spoofed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.Disk{ID: d.ID, Name: "pvc-1234", Zone: zoneB, SizeGiB: 10, VolumeType: "gp3", IOPS: 4000, Throughput: 250,
		Encrypted: true, State: cloud.DiskAvailable}
	got := *d
	got.Tags, got.CreateTime, got.Attachments, got.KMSKeyID = nil, time.Time{}, nil, ""
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("disk = %+v\nwant   %+v", got, want)
	}
	wantTags := map[string]string{
		cloud.TagName: "pvc-1234", cloud.TagPVCName: "data", cloud.TagPVCNamespace: "db", cloud.TagPVName: "pvc-1234",
		cloud.TagClusterID: "c1", cloud.TagKubernetesClusterPrefix + "c1": "owned", "team": "storage",
	}
	if fmt.Sprint(d.Tags) != fmt.Sprint(wantTags) {
		t.Errorf("tags = %v\nwant   %v", d.Tags, wantTags)
	}
	if v := e.rawVolume(t, d.ID); v.State != ec2types.VolumeStateAvailable || aws.ToInt32(v.Size) != 10 {
		t.Errorf("fakecloud has %s %d GiB", v.State, aws.ToInt32(v.Size))
	}
}

func TestCreateDiskIsIdempotentByName(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d1 := e.mustCreate(t, "pvc-a", cloud.DiskOptions{SizeGiB: 2})
	d2 := e.mustCreate(t, "pvc-a", cloud.DiskOptions{SizeGiB: 2})
	if d1.ID != d2.ID {
		t.Fatalf("same name, same options: %s then %s", d1.ID, d2.ID)
	}
	_, err := e.CreateDisk(testCtx(t), "pvc-a", cloud.DiskOptions{Zone: zoneA, SizeGiB: 3})
	wantKinds(t, err, cloud.ErrIdempotentParameterMismatch, cloud.ErrAlreadyExists)
	if n := e.volumeCount(t); n != 1 {
		t.Errorf("fakecloud holds %d volumes, want 1", n)
	}
	if d, err := e.GetDiskByName(testCtx(t), "pvc-a"); err != nil || d.ID != d1.ID {
		t.Errorf("GetDiskByName = %v, %v; want %s", d, err, d1.ID)
	}
}

// TestCreateDiskCopy: a disk with SourceDiskID is a copy (CopyVolumes) in the source's zone, idempotent by name,
// at least the source's size.
func TestCreateDiskCopy(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	src, err := e.CreateDisk(testCtx(t), "pvc-src", cloud.DiskOptions{Zone: zoneB, SizeGiB: 3})
	if err != nil {
		t.Fatal(err)
	}
	opts := cloud.DiskOptions{Zone: zoneB, SourceDiskID: src.ID}
	c1, err := e.CreateDisk(testCtx(t), "pvc-clone", opts)
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if c1.ID == src.ID || c1.SourceDiskID != src.ID || c1.Zone != zoneB || c1.SizeGiB != 3 || c1.Name != "pvc-clone" {
		t.Errorf("copy %+v of %s", c1, src.ID)
	}
	if c2, err := e.CreateDisk(testCtx(t), "pvc-clone", opts); err != nil || c2.ID != c1.ID {
		t.Errorf("the same copy again: %v, %v; want %s", c2, err, c1.ID)
	}
	if e.calls(t)["CopyVolumes"] != 2 {
		t.Errorf("calls %v, want 2 CopyVolumes", e.calls(t))
	}
	tests := []struct {
		name string
		opts cloud.DiskOptions
		want []error
	}{
		{"another source under the name", cloud.DiskOptions{Zone: zoneB, SourceDiskID: src.ID, SizeGiB: 4},
			[]error{cloud.ErrIdempotentParameterMismatch, cloud.ErrAlreadyExists}},
		{"smaller than the source", cloud.DiskOptions{Zone: zoneB, SourceDiskID: src.ID, SizeGiB: 2}, []error{cloud.ErrInvalidArgument}},
		{"missing source", cloud.DiskOptions{Zone: zoneB, SourceDiskID: "vol-0123456789abcdef0"}, []error{cloud.ErrNotFound}},
		{"snapshot and source", cloud.DiskOptions{Zone: zoneB, SourceDiskID: src.ID, SnapshotID: "snap-0123456789abcdef0"}, []error{cloud.ErrInvalidArgument}},
	}
	for _, tc := range tests {
		name := "pvc-clone"
		if tc.name != "another source under the name" {
			name = "pvc-" + strings.ReplaceAll(tc.name, " ", "-")
		}
		_, err := e.CreateDisk(testCtx(t), name, tc.opts)
		wantKinds(t, err, tc.want...)
	}
}

// TestCreateDiskAfterLostReply: fakecloud creates the volume and then answers InternalError, as if the reply
// were lost. Whether the SDK retries or the caller does, the ClientToken leads to the same single volume.
func TestCreateDiskAfterLostReply(t *testing.T) {
	t.Run("SDK retry", func(t *testing.T) {
		e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
			"CreateVolume": {Rate: 1, Code: "InternalError", Count: 1},
		}}})
		e.mustCreate(t, "pvc-lost", cloud.DiskOptions{})
		if n := e.volumeCount(t); n != 1 {
			t.Errorf("fakecloud holds %d volumes, want 1", n)
		}
		calls := e.calls(t)
		if calls["CreateVolume/InternalError"] != 1 || calls["CreateVolume/Success"] != 1 {
			t.Errorf("CreateVolume calls: %v", calls)
		}
	})
	t.Run("caller retry", func(t *testing.T) {
		e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
			"CreateVolume": {Rate: 1, Code: "InternalError", Count: 2},
		}}}, func(o *Options) { o.Retry.MaxAttempts = 2 })
		_, err := e.CreateDisk(testCtx(t), "pvc-lost", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		wantKinds(t, err, cloud.ErrUnavailable)
		if n := e.volumeCount(t); n != 1 {
			t.Fatalf("after the failed call fakecloud holds %d volumes, want the 1 whose reply was lost", n)
		}
		d := e.mustCreate(t, "pvc-lost", cloud.DiskOptions{})
		if n := e.volumeCount(t); n != 1 {
			t.Errorf("after the retry fakecloud holds %d volumes, want 1", n)
		}
		if d.State != cloud.DiskAvailable {
			t.Errorf("retried disk is %s", d.State)
		}
	})
}

// TestCreateDiskReusesNameAfterDelete: a name deleted and created again gets a new disk (the first token still
// answers with the deleting one), and retrying that create gets the same new disk.
func TestCreateDiskReusesNameAfterDelete(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeDelete: time.Minute}})
	old := e.mustCreate(t, "pvc-again", cloud.DiskOptions{})
	if err := e.DeleteDisk(testCtx(t), old.ID); err != nil {
		t.Fatal(err)
	}
	d1 := e.mustCreate(t, "pvc-again", cloud.DiskOptions{})
	d2 := e.mustCreate(t, "pvc-again", cloud.DiskOptions{})
	if d1.ID == old.ID || d2.ID != d1.ID {
		t.Fatalf("old %s, new %s, retried %s: want a new disk, then the same", old.ID, d1.ID, d2.ID)
	}
	if got, err := e.GetDiskByName(testCtx(t), "pvc-again"); err != nil || got.ID != d1.ID {
		t.Errorf("GetDiskByName = %v, %v; want the live disk %s, not the deleting one", got, err, d1.ID)
	}
}

func TestCreateDiskErrors(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	cases := []struct {
		name string
		opts cloud.DiskOptions
		want []error
		code string
	}{
		{"no zone", cloud.DiskOptions{SizeGiB: 1}, []error{cloud.ErrInvalidArgument}, ""},
		{"no size", cloud.DiskOptions{Zone: zoneA}, []error{cloud.ErrInvalidArgument}, ""},
		{"unknown zone", cloud.DiskOptions{Zone: "mars-1a", SizeGiB: 1}, []error{cloud.ErrInvalidArgument}, "InvalidZone.NotFound"},
		{"unknown type", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1, VolumeType: "gp9"}, []error{cloud.ErrInvalidArgument}, "InvalidParameterValue"},
		{"IOPS too high", cloud.DiskOptions{Zone: zoneA, SizeGiB: 100, VolumeType: "gp3", IOPS: 200000}, []error{cloud.ErrInvalidArgument}, "InvalidParameterValue"},
		{"IOPS on gp2", cloud.DiskOptions{Zone: zoneA, SizeGiB: 100, VolumeType: "gp2", IOPS: 300}, []error{cloud.ErrInvalidArgument}, "InvalidParameterCombination"},
		{"unknown snapshot", cloud.DiskOptions{Zone: zoneA, SnapshotID: "snap-0123456789abcdef0"}, []error{cloud.ErrNotFound}, "InvalidSnapshot.NotFound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.CreateDisk(testCtx(t), "pvc-"+strings.ReplaceAll(tc.name, " ", "-"), tc.opts)
			wantKinds(t, err, tc.want...)
			if cloud.Code(err) != tc.code {
				t.Errorf("code %q, want %q", cloud.Code(err), tc.code)
			}
		})
	}
	t.Run("quota", func(t *testing.T) {
		if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
			"CreateVolume": {Rate: 1, Code: "VolumeLimitExceeded", Before: true, Count: 1},
		}}); err != nil {
			t.Fatal(err)
		}
		_, err := e.CreateDisk(testCtx(t), "pvc-quota", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		wantKinds(t, err, cloud.ErrLimitExceeded)
	})
	if n := e.volumeCount(t); n != 0 {
		t.Errorf("failed creates left %d volumes", n)
	}
}

// TestCreateDiskWaitTimesOut: a volume stuck in creating holds CreateDisk until its context ends; the volume
// is kept, and a retry after the cloud recovers returns it.
func TestCreateDiskWaitTimesOut(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Stuck: []string{faults.TransitionVolumeCreate}}})
	_, err := e.CreateDisk(ctxTimeout(t, 300*time.Millisecond), "pvc-stuck", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
	if !isDeadline(err) || !strings.Contains(err.Error(), "creating") {
		t.Fatalf("CreateDisk = %v, want a deadline error naming the state", err)
	}
	if n := e.volumeCount(t); n != 1 {
		t.Fatalf("fakecloud holds %d volumes, want the 1 still creating", n)
	}
	if err := e.fc.Server.Faults.SetConfig(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	d := e.mustCreate(t, "pvc-stuck", cloud.DiskOptions{})
	if d.State != cloud.DiskAvailable || e.volumeCount(t) != 1 {
		t.Errorf("retry gave %s with %d volumes, want the same volume, available", d.State, e.volumeCount(t))
	}
}

// errorStateProxy sits between the SDK and fakecloud and reports every volume as in state error in
// DescribeVolumes replies: fakecloud itself never puts a volume in error.
func errorStateProxy(t *testing.T, fc *fakecloudtest.Env) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		fc.Server.Handler.ServeHTTP(rec, r)
		out := rec.Body.String()
		if form.Get("Action") == "DescribeVolumes" {
			for _, s := range []string{"creating", "available"} {
				out = strings.ReplaceAll(out, "<status>"+s+"</status>", "<status>error</status>")
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCreateDiskErrorStateDeletesDisk: a volume that goes to state error fails CreateDisk at once, and is
// deleted, so nothing leaks.
func TestCreateDiskErrorStateDeletesDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	proxied, err := New(testCtx(t), func() Options {
		o := fastOptions(e.fc, nil)
		o.Endpoint = errorStateProxy(t, e.fc)
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	_, err = proxied.CreateDisk(testCtx(t), "pvc-broken", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
	wantKinds(t, err, cloud.ErrFailed)
	fakecloudtest.WaitFor(t, 5*time.Second, "the failed volume to be deleted", func(ctx context.Context) (bool, error) {
		out, err := e.raw(t).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
		return err == nil && len(out.Volumes) == 0, err
	})
}

func TestDeleteDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	d := e.mustCreate(t, "pvc-del", cloud.DiskOptions{})
	if err := e.DeleteDisk(testCtx(t), d.ID); err != nil {
		t.Fatal(err)
	}
	// Deletion is accepted, not waited for; the volume is gone once fakecloud finishes it.
	fakecloudtest.WaitFor(t, 5*time.Second, "the volume to be gone", func(ctx context.Context) (bool, error) {
		err := e.DeleteDisk(ctx, d.ID)
		return errors.Is(err, cloud.ErrNotFound), err
	})

	t.Run("unknown", func(t *testing.T) {
		err := e.DeleteDisk(testCtx(t), "vol-0123456789abcdef0")
		wantKinds(t, err, cloud.ErrNotFound)
	})
	t.Run("malformed", func(t *testing.T) {
		err := e.DeleteDisk(testCtx(t), "bogus")
		wantKinds(t, err, cloud.ErrNotFound, cloud.ErrInvalidArgument)
	})
	t.Run("attached", func(t *testing.T) {
		a := e.mustCreate(t, "pvc-del-attached", cloud.DiskOptions{})
		if _, err := e.AttachDisk(testCtx(t), a.ID, "i-0a000000000000001"); err != nil {
			t.Fatal(err)
		}
		wantKinds(t, e.DeleteDisk(testCtx(t), a.ID), cloud.ErrInUse)
	})
	t.Run("creating", func(t *testing.T) {
		if err := e.fc.Server.Faults.SetConfig(faults.Config{Stuck: []string{faults.TransitionVolumeCreate}}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.fc.Server.Faults.SetConfig(faults.Config{}) }()
		out, err := e.raw(t).CreateVolume(testCtx(t), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		wantKinds(t, e.DeleteDisk(testCtx(t), aws.ToString(out.VolumeId)), cloud.ErrIncorrectState)
	})
}

func TestGetDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-get", cloud.DiskOptions{SizeGiB: 3})
	got, err := e.GetDisk(testCtx(t), d.ID)
	if err != nil || got.ID != d.ID || got.Name != "pvc-get" || got.SizeGiB != 3 {
		t.Fatalf("GetDisk = %+v, %v", got, err)
	}
	for _, id := range []string{"vol-0123456789abcdef0", "bogus"} {
		_, err := e.GetDisk(testCtx(t), id)
		wantKinds(t, err, cloud.ErrNotFound)
	}
	_, err = e.GetDiskByName(testCtx(t), "pvc-none")
	wantKinds(t, err, cloud.ErrNotFound)
}

func TestListDisks(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{}, func(o *Options) { o.ClusterID = "c1" })
	want := map[string]bool{}
	for _, n := range names("pvc-list", 7) {
		want[e.mustCreate(t, n, cloud.DiskOptions{}).ID] = true
	}
	// Not listed: a volume without a CSI name, and one of another cluster.
	if _, err := e.raw(t).CreateVolume(testCtx(t), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	other, err := New(testCtx(t), func() Options { o := fastOptions(e.fc, nil); o.ClusterID = "c2"; return o }())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.CreateDisk(testCtx(t), "pvc-other-cluster", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
		t.Fatal(err)
	}

	for _, size := range []int32{0, 1, 2, 5, 100} {
		t.Run(fmt.Sprintf("page=%d", size), func(t *testing.T) {
			got := map[string]bool{}
			req := cloud.PageRequest{MaxResults: size}
			for range 20 {
				page, err := e.ListDisks(testCtx(t), req)
				if err != nil {
					t.Fatal(err)
				}
				if size > 0 && len(page.Disks) > int(size) {
					t.Fatalf("page of %d, asked for %d", len(page.Disks), size)
				}
				for _, d := range page.Disks {
					if got[d.ID] {
						t.Errorf("%s listed twice", d.ID)
					}
					got[d.ID] = true
				}
				if page.NextToken == "" {
					break
				}
				req.NextToken = page.NextToken
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("listed %v\nwant   %v", got, want)
			}
		})
	}
	_, err = e.ListDisks(testCtx(t), cloud.PageRequest{NextToken: "garbage"})
	wantKinds(t, err, cloud.ErrInvalidArgument)
}
