package driver

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// groupVolumes makes 1 GiB volumes through CSI, each in the zone its name's key says and published to the
// instance there unless the zone is given as "detached:ZONE"; it returns their IDs by name.
func groupVolumes(t *testing.T, c *ControllerServer, env *fakecloudtest.Env, zones map[string]string) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	for name, zone := range zones {
		detached := strings.HasPrefix(zone, "detached:")
		zone = strings.TrimPrefix(zone, "detached:")
		vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			CapacityRange: &csi.CapacityRange{RequiredBytes: gib}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq(zone)}})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = vol.GetVolume().GetVolumeId()
		if detached {
			continue
		}
		if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: ids[name],
			NodeId: env.Instances[zone], VolumeCapability: mountRWO}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func sourcesOf(g *csi.VolumeGroupSnapshot) []string {
	var out []string
	for _, s := range g.GetSnapshots() {
		out = append(out, s.GetSourceVolumeId())
	}
	slices.Sort(out)
	return out
}

func snapshotIDsOf(g *csi.VolumeGroupSnapshot) []string {
	var out []string
	for _, s := range g.GetSnapshots() {
		out = append(out, s.GetSnapshotId())
	}
	return out
}

func TestGroupSnapshotCreate(t *testing.T) {
	ctrl, env := newTestController(t)
	g := NewGroupControllerServer(ctrl)
	ctx := context.Background()
	// a1, a2 and other on instance A; b1 on instance B; d1 attached nowhere.
	vols := groupVolumes(t, ctrl, env, map[string]string{"a1": "us-east-1a", "a2": "us-east-1a", "other": "us-east-1a",
		"b1": "us-east-1b", "d1": "detached:us-east-1a"})
	create := func(name string, sources ...string) (*csi.VolumeGroupSnapshot, error) {
		var ids []string
		for _, s := range sources {
			ids = append(ids, cmp.Or(vols[s], s))
		}
		resp, err := g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: ids,
			Parameters: map[string]string{ParamGroupSnapshotName: "both", ParamGroupSnapshotNamespace: "db", "tagSpecification_1": "team=storage",
				"deletionPolicy": "Delete"}})
		return resp.GetGroupSnapshot(), err
	}
	first, err := create("group-1", "a1", "a2")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		group   string
		sources []string
		code    codes.Code
		errText string
	}{
		{name: "idempotent repeat, sources in another order", group: "group-1", sources: []string{"a2", "a1"}},
		{name: "conflicting repeat", group: "group-1", sources: []string{"a1", "other"}, code: codes.AlreadyExists, errText: "group-1"},
		{name: "volumes on two instances", group: "group-2", sources: []string{"a1", "b1"}, code: codes.FailedPrecondition,
			errText: "must all be attached to one instance"},
		{name: "a detached volume", group: "group-3", sources: []string{"a1", "d1"}, code: codes.FailedPrecondition, errText: "is not attached"},
		{name: "a missing volume", group: "group-4", sources: []string{"a1", "vol-0123456789abcdef0"}, code: codes.NotFound, errText: "vol-0123456789abcdef0"},
		{name: "a malformed volume ID", group: "group-5", sources: []string{"a1", "disk-1"}, code: codes.NotFound, errText: "disk-1"},
		{name: "a volume listed twice", group: "group-6", sources: []string{"a1", "a1"}, code: codes.InvalidArgument, errText: "twice"},
		{name: "no name", sources: []string{"a1"}, code: codes.InvalidArgument},
		{name: "no sources", group: "group-7", code: codes.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := create(tc.group, tc.sources...)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.errText) {
				t.Fatalf("err = %v, want %s containing %q", err, tc.code, tc.errText)
			}
			if tc.code == codes.OK && (got.GetGroupSnapshotId() != first.GetGroupSnapshotId() ||
				!slices.Equal(snapshotIDsOf(got), snapshotIDsOf(first))) {
				t.Errorf("repeat = %v, want %v", got, first)
			}
		})
	}

	t.Run("the group", func(t *testing.T) {
		if want := []string{vols["a1"], vols["a2"]}; !slices.Equal(sourcesOf(first), slices.Sorted(slices.Values(want))) {
			t.Errorf("sources = %v, want %v", sourcesOf(first), want)
		}
		if !validGroupSnapshotID(first.GetGroupSnapshotId()) || first.GetCreationTime() == nil || first.GetCreationTime().AsTime().IsZero() {
			t.Errorf("group = %v", first)
		}
		ready := true
		for _, s := range first.GetSnapshots() {
			ready = ready && s.GetReadyToUse()
			if s.GetGroupSnapshotId() != first.GetGroupSnapshotId() || s.GetSizeBytes() != gib {
				t.Errorf("snapshot = %v, want one of group %s of 1 GiB", s, first.GetGroupSnapshotId())
			}
			snap, err := ctrl.cloud.GetSnapshot(ctx, s.GetSnapshotId())
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string]string{"team": "storage", "kubernetes.io/created-for/volumegroupsnapshot/name": "both",
				"kubernetes.io/created-for/volumegroupsnapshot/namespace": "db", cloud.TagGroupSnapshotName: "group-1"} {
				if snap.Tags[k] != v {
					t.Errorf("snapshot %s: tag %s = %q, want %q", snap.ID, k, snap.Tags[k], v)
				}
			}
		}
		if first.GetReadyToUse() != ready {
			t.Errorf("group ready = %t, its snapshots' %t", first.GetReadyToUse(), ready)
		}
	})

	// Only the group's two volumes were snapshotted: not the instance's other volume, nor anything for the
	// refused requests.
	t.Run("nothing else snapshotted", func(t *testing.T) {
		all, err := ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range all.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
			if e.GetSnapshot().GetGroupSnapshotId() != first.GetGroupSnapshotId() {
				t.Errorf("listed snapshot %v is not the group's", e.GetSnapshot())
			}
		}
		if slices.Sort(ids); !slices.Equal(ids, slices.Sorted(slices.Values(snapshotIDsOf(first)))) {
			t.Errorf("snapshots = %v, want the group's %v", ids, snapshotIDsOf(first))
		}
	})
}

func TestGroupSnapshotGetAndDelete(t *testing.T) {
	ctrl, env := newTestController(t)
	g := NewGroupControllerServer(ctrl)
	ctx := context.Background()
	vols := groupVolumes(t, ctrl, env, map[string]string{"a1": "us-east-1a", "a2": "us-east-1a"})
	resp, err := g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "group", SourceVolumeIds: []string{vols["a1"], vols["a2"]}})
	if err != nil {
		t.Fatal(err)
	}
	group := resp.GetGroupSnapshot()
	id, members := group.GetGroupSnapshotId(), snapshotIDsOf(group)
	loner, err := ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "alone", SourceVolumeId: vols["a1"]})
	if err != nil {
		t.Fatal(err)
	}
	other := loner.GetSnapshot().GetSnapshotId()

	fakecloudtest.WaitFor(t, 10*time.Second, "group "+id+" ready", func(ctx context.Context) (bool, error) {
		got, err := g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id})
		return err == nil && got.GetGroupSnapshot().GetReadyToUse(), err
	})
	gets := []struct {
		name        string
		id          string
		snapshotIDs []string
		code        codes.Code
	}{
		{name: "by ID", id: id},
		{name: "with its snapshot IDs", id: id, snapshotIDs: members},
		{name: "with a snapshot of its own missing", id: id, snapshotIDs: members[:1], code: codes.InvalidArgument},
		{name: "with another snapshot", id: id, snapshotIDs: append(slices.Clone(members), other), code: codes.InvalidArgument},
		{name: "with a snapshot already gone", id: id, snapshotIDs: append(slices.Clone(members), "snap-0123456789abcdef0")},
		{name: "unknown group", id: "vgs-00000000000000000000000000000000", code: codes.NotFound},
		{name: "malformed group ID", id: "group", code: codes.NotFound},
		{name: "no group ID", code: codes.InvalidArgument},
	}
	for _, tc := range gets {
		t.Run("get "+tc.name, func(t *testing.T) {
			got, err := g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: tc.id, SnapshotIds: tc.snapshotIDs})
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.code == codes.OK && (!slices.Equal(snapshotIDsOf(got.GetGroupSnapshot()), members) || !got.GetGroupSnapshot().GetReadyToUse()) {
				t.Errorf("group = %v, want the ready group of %v", got.GetGroupSnapshot(), members)
			}
		})
	}

	if _, err := ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: members[0]}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("DeleteSnapshot of a group's snapshot: %v, want InvalidArgument", err)
	}
	deletes := []struct {
		name        string
		id          string
		snapshotIDs []string
		code        codes.Code
	}{
		{name: "with another snapshot", id: id, snapshotIDs: []string{members[0], other}, code: codes.InvalidArgument},
		{name: "no group ID", code: codes.InvalidArgument},
		{name: "with its snapshot IDs", id: id, snapshotIDs: members},
		{name: "again, once gone", id: id, snapshotIDs: members},
		{name: "unknown group", id: "vgs-00000000000000000000000000000000"},
		{name: "malformed group ID", id: "group"},
	}
	for _, tc := range deletes {
		t.Run("delete "+tc.name, func(t *testing.T) {
			_, err := g.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: tc.id, SnapshotIds: tc.snapshotIDs})
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
	for _, s := range members {
		if _, err := ctrl.cloud.GetSnapshot(ctx, s); status.Code(rpcError(err)) != codes.NotFound {
			t.Errorf("snapshot %s of the deleted group: %v, want NotFound", s, err)
		}
	}
	if _, err := ctrl.cloud.GetSnapshot(ctx, other); err != nil {
		t.Errorf("the snapshot outside the group: %v, want it kept", err)
	}
	if _, err := g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("get the deleted group: %v, want NotFound", err)
	}
}

// The group controller is served on the driver's socket, and the identity says so.
func TestGroupControllerServed(t *testing.T) {
	ctrl, _ := newTestController(t)
	conn := serveSocket(t, Services{Controller: ctrl, GroupController: NewGroupControllerServer(ctrl)})
	caps, err := csi.NewGroupControllerClient(conn).GroupControllerGetCapabilities(context.Background(), &csi.GroupControllerGetCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 1 ||
		caps.GetCapabilities()[0].GetRpc().GetType() != csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT {
		t.Errorf("GroupControllerGetCapabilities = %v, %v", caps, err)
	}
	plugin, err := NewIdentityServer("disk.csi.diskforge.io", "test", true, nil).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil || !slices.ContainsFunc(plugin.GetCapabilities(), func(c *csi.PluginCapability) bool {
		return c.GetService().GetType() == csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE
	}) {
		t.Errorf("plugin capabilities = %v, %v; want GROUP_CONTROLLER_SERVICE", plugin, err)
	}
}

// A group spread over two instances and a detached volume is refused by default and taken, one CreateSnapshots
// per instance and one CreateSnapshot per detached volume, under multiInstance; it is then a group like any.
func TestGroupSnapshotMultiInstance(t *testing.T) {
	ctrl, env := newTestController(t)
	g := NewGroupControllerServer(ctrl)
	ctx := context.Background()
	vols := groupVolumes(t, ctrl, env, map[string]string{"a1": "us-east-1a", "a2": "us-east-1a", "b1": "us-east-1b",
		"d1": "detached:us-east-1a", "d2": "detached:us-east-1b"})
	multi := map[string]string{"multiInstance": "true", "tagSpecification_1": "team=storage", "deletionPolicy": "Delete"}
	groups := map[string]*csi.VolumeGroupSnapshot{}
	cases := []struct {
		name    string
		group   string
		sources []string
		params  map[string]string
		code    codes.Code
		errText string
	}{
		{name: "two instances and a detached volume, strict", group: "spread", sources: []string{"a1", "b1", "d1"},
			code: codes.FailedPrecondition, errText: `multiInstance: "true"`},
		{name: "multiInstance false is strict", group: "spread", sources: []string{"a1", "b1", "d1"},
			params: map[string]string{"multiInstance": "false"}, code: codes.FailedPrecondition, errText: "one instance"},
		{name: "multiInstance not a bool", group: "spread", sources: []string{"a1", "b1", "d1"},
			params: map[string]string{"multiInstance": "sometimes"}, code: codes.InvalidArgument, errText: "multiInstance"},
		{name: "two instances and a detached volume", group: "spread", sources: []string{"a1", "a2", "b1", "d1"}, params: multi},
		{name: "idempotent repeat", group: "spread", sources: []string{"d1", "b1", "a2", "a1"}, params: multi},
		{name: "conflicting repeat", group: "spread", sources: []string{"a1", "b1"}, params: multi, code: codes.AlreadyExists},
		{name: "detached volumes only", group: "detached", sources: []string{"d1", "d2"}, params: multi},
		{name: "one instance under multiInstance", group: "one", sources: []string{"a1", "a2"}, params: multi},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, s := range tc.sources {
				ids = append(ids, vols[s])
			}
			resp, err := g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: tc.group, SourceVolumeIds: ids, Parameters: tc.params})
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.errText) {
				t.Fatalf("err = %v, want %s containing %q", err, tc.code, tc.errText)
			}
			if tc.code != codes.OK {
				return
			}
			got := resp.GetGroupSnapshot()
			if want := slices.Sorted(slices.Values(ids)); !slices.Equal(sourcesOf(got), want) {
				t.Errorf("sources = %v, want %v", sourcesOf(got), want)
			}
			if prev, ok := groups[tc.group]; ok && (got.GetGroupSnapshotId() != prev.GetGroupSnapshotId() ||
				!slices.Equal(snapshotIDsOf(got), snapshotIDsOf(prev))) {
				t.Errorf("repeat = %v, want %v", got, prev)
			}
			groups[tc.group] = got
			for _, s := range got.GetSnapshots() {
				snap, err := ctrl.cloud.GetSnapshot(ctx, s.GetSnapshotId())
				if err != nil {
					t.Fatal(err)
				}
				if s.GetGroupSnapshotId() != got.GetGroupSnapshotId() || snap.Tags[cloud.TagGroupSnapshotName] != tc.group || snap.Tags["team"] != "storage" {
					t.Errorf("snapshot %s: group %q, tags %v", snap.ID, s.GetGroupSnapshotId(), snap.Tags)
				}
			}
		})
	}

	spread := groups["spread"]
	if spread == nil {
		t.Fatal("no spread group")
	}
	id, members := spread.GetGroupSnapshotId(), snapshotIDsOf(spread)
	fakecloudtest.WaitFor(t, 10*time.Second, "group "+id+" ready", func(ctx context.Context) (bool, error) {
		got, err := g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members})
		if err == nil && !slices.Equal(snapshotIDsOf(got.GetGroupSnapshot()), members) {
			t.Fatalf("get = %v, want the snapshots %v", got.GetGroupSnapshot(), members)
		}
		return err == nil && got.GetGroupSnapshot().GetReadyToUse(), err
	})
	if _, err := g.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members}); err != nil {
		t.Fatal(err)
	}
	for _, s := range members {
		if _, err := ctrl.cloud.GetSnapshot(ctx, s); status.Code(rpcError(err)) != codes.NotFound {
			t.Errorf("snapshot %s of the deleted group: %v, want NotFound", s, err)
		}
	}
	if _, err := g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("get the deleted group: %v, want NotFound", err)
	}
}

// attachBeforeCreateSnapshot runs attach, once armed, before the first CreateSnapshot request goes out: a volume
// attached while a group is taken.
type attachBeforeCreateSnapshot struct {
	next   http.RoundTripper
	mu     sync.Mutex
	attach func()
}

func (a *attachBeforeCreateSnapshot) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		a.mu.Lock()
		attach := a.attach
		if bytes.Contains(body, []byte("Action=CreateSnapshot&")) {
			a.attach = nil
		} else {
			attach = nil
		}
		a.mu.Unlock()
		if attach != nil {
			attach()
		}
	}
	return a.next.RoundTrip(req)
}

// A detached volume attached while the group is taken may have been written during its snapshot: the group is
// refused with Aborted, and nothing is left of it.
func TestGroupSnapshotMultiInstanceAttachedMidCall(t *testing.T) {
	// A CA bundle from the environment needs the SDK's own client, which a plain one replacing it is not.
	t.Setenv("AWS_CA_BUNDLE", "")
	hook := &attachBeforeCreateSnapshot{next: http.DefaultTransport}
	ctrl, env := newTestController(t, func(o *ec2cloud.Options) { o.HTTPClient = &http.Client{Transport: hook} })
	g := NewGroupControllerServer(ctrl)
	ctx := context.Background()
	vols := groupVolumes(t, ctrl, env, map[string]string{"a1": "us-east-1a", "d1": "detached:us-east-1a"})
	ec2c := env.EC2(t)
	hook.attach = func() {
		if _, err := ec2c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(vols["d1"]), InstanceId: aws.String(env.Instances["us-east-1a"]),
			Device: aws.String("/dev/xvdbz")}); err != nil {
			t.Error(err)
		}
	}
	_, err := g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "moving", SourceVolumeIds: []string{vols["a1"], vols["d1"]},
		Parameters: map[string]string{"multiInstance": "true"}})
	if status.Code(err) != codes.Aborted || !strings.Contains(status.Convert(err).Message(), vols["d1"]) {
		t.Fatalf("err = %v, want Aborted naming %s", err, vols["d1"])
	}
	if hook.attach != nil {
		t.Fatal("no CreateSnapshot was made")
	}
	all, err := ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetEntries()) != 0 {
		t.Errorf("snapshots left: %v", all.GetEntries())
	}
}

// TestGroupSnapshotRepliesOnceCompleted: CreateVolumeGroupSnapshot answers once every snapshot of the group has
// completed (the snapshotter keeps each member's readiness from the first reply), and Unavailable when they have
// not by the caller's deadline; a retry finds the same group.
func TestGroupSnapshotRepliesOnceCompleted(t *testing.T) {
	cases := []struct {
		name     string
		snapshot time.Duration // how long fakecloud takes to complete a snapshot
		deadline time.Duration
		code     codes.Code
	}{
		{name: "completed within the deadline", snapshot: 300 * time.Millisecond, deadline: 20 * time.Second, code: codes.OK},
		{name: "still pending at the deadline", snapshot: time.Hour, deadline: groupWaitMargin + time.Second, code: codes.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctrl, env := newTestControllerOn(t, fakecloudtest.Options{Durations: state.Durations{Snapshot: tc.snapshot}})
			g := NewGroupControllerServer(ctrl)
			vols := groupVolumes(t, ctrl, env, map[string]string{"a1": "us-east-1a", "a2": "us-east-1a"})
			req := &csi.CreateVolumeGroupSnapshotRequest{Name: "group-1", SourceVolumeIds: []string{vols["a1"], vols["a2"]}}
			create := func() (*csi.VolumeGroupSnapshot, error) {
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				defer cancel()
				resp, err := g.CreateVolumeGroupSnapshot(ctx, req)
				return resp.GetGroupSnapshot(), err
			}
			grp, err := create()
			if status.Code(err) != tc.code {
				t.Fatalf("CreateVolumeGroupSnapshot: %v; want %s", err, tc.code)
			}
			if err != nil {
				again, err2 := create()
				if status.Code(err2) != tc.code {
					t.Fatalf("retry: %v; want %s", err2, tc.code)
				}
				if again != nil {
					t.Fatalf("retry answered %v with %v", again, err2)
				}
				return
			}
			if !grp.GetReadyToUse() || len(grp.GetSnapshots()) != 2 {
				t.Fatalf("group %v: want 2 snapshots, all ready", grp)
			}
			for _, s := range grp.GetSnapshots() {
				if !s.GetReadyToUse() {
					t.Errorf("snapshot %s not ready in the reply", s.GetSnapshotId())
				}
			}
		})
	}
}
