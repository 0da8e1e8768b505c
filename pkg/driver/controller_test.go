package driver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/topology"
)

func TestSizeGiB(t *testing.T) {
	cases := []struct {
		name            string
		required, limit int64
		fallback        int64
		want            int32
		code            codes.Code
	}{
		{"nothing asked", 0, 0, 1, 1, codes.OK},
		{"rounds up", gib + 1, 0, 1, 2, codes.OK},
		{"exact", 3 * gib, 3 * gib, 1, 3, codes.OK},
		{"limit below the next GiB", gib + 1, gib + 100, 1, 0, codes.OutOfRange},
		{"limit only", 0, 5 * gib, 10, 5, codes.OK},
		{"limit under a GiB", 0, gib - 1, 1, 0, codes.OutOfRange},
		{"required over limit", 2 * gib, gib, 1, 0, codes.InvalidArgument},
		{"negative", -1, 0, 1, 0, codes.InvalidArgument},
	}
	for _, tc := range cases {
		got, err := sizeGiB(&csi.CapacityRange{RequiredBytes: tc.required, LimitBytes: tc.limit}, tc.fallback)
		if status.Code(err) != tc.code || got != tc.want {
			t.Errorf("%s: sizeGiB = %d, %v; want %d, %s", tc.name, got, err, tc.want, tc.code)
		}
	}
}

// newTestController runs a controller against an in-process fakecloud (file backend) through the real SDK.
func newTestController(t *testing.T, opts ...func(*ec2cloud.Options)) (*ControllerServer, *fakecloudtest.Env) {
	t.Helper()
	return newTestControllerOn(t, fakecloudtest.Options{}, opts...)
}

// newTestControllerOn is newTestController on a fakecloud started with fo.
func newTestControllerOn(t *testing.T, fo fakecloudtest.Options, opts ...func(*ec2cloud.Options)) (*ControllerServer, *fakecloudtest.Env) {
	t.Helper()
	env := fakecloudtest.Start(t, fo)
	o := ec2cloud.Options{Endpoint: env.URL, Region: env.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait: ec2cloud.WaitOptions{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := ec2cloud.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return NewControllerServer(c), env
}

func zoneReq(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: topology.Segments(z)})
	}
	return out
}

var (
	mountRWO = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	blockRWX = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
)

func TestControllerCreateVolume(t *testing.T) {
	c, _ := newTestController(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		req      *csi.CreateVolumeRequest
		code     codes.Code
		errText  string
		zone     string
		sizeGiB  int64
		volCtxFS string
		volCtx   map[string]string // format options the volume context must carry
	}{
		{name: "preferred zone first", req: &csi.CreateVolumeRequest{Name: "pvc-a", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a", "us-east-1b"), Preferred: zoneReq("us-east-1b")}},
			zone: "us-east-1b", sizeGiB: DefaultVolumeSizeGiB},
		{name: "requisite when nothing preferred", req: &csi.CreateVolumeRequest{Name: "pvc-b", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib / 2}, Parameters: map[string]string{ParamFSType: "xfs"},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1c")}},
			zone: "us-east-1c", sizeGiB: 2, volCtxFS: "xfs"},
		{name: "zone the cloud lacks", req: &csi.CreateVolumeRequest{Name: "pvc-c", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("eu-west-1a")}}, code: codes.InvalidArgument, errText: "eu-west-1a"},
		{name: "unknown parameter", req: &csi.CreateVolumeRequest{Name: "pvc-d", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{"colour": "blue"}}, code: codes.InvalidArgument, errText: "colour"},
		{name: "cloud refuses the type's limits", req: &csi.CreateVolumeRequest{Name: "pvc-e", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{"type": "io1", "iops": "100000"}, CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * gib}},
			code: codes.InvalidArgument, errText: "maximum is 64000"},
		{name: "size beyond the type's maximum", req: &csi.CreateVolumeRequest{Name: "pvc-big", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{"type": "standard"}, CapacityRange: &csi.CapacityRange{RequiredBytes: 2000 * gib}},
			code: codes.OutOfRange, errText: "1–1024 GiB"},
		{name: "size below the type's minimum", req: &csi.CreateVolumeRequest{Name: "pvc-small", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{"type": "st1"}, CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * gib}},
			code: codes.OutOfRange, errText: "125–16384 GiB"},
		{name: "multi-node needs io1/io2", req: &csi.CreateVolumeRequest{Name: "pvc-f", VolumeCapabilities: []*csi.VolumeCapability{blockRWX},
			Parameters: map[string]string{"type": "gp3"}}, code: codes.InvalidArgument, errText: "io1 or io2"},
		{name: "multi-node io2 block", req: &csi.CreateVolumeRequest{Name: "pvc-g", VolumeCapabilities: []*csi.VolumeCapability{blockRWX},
			Parameters: map[string]string{"type": "io2", "iops": "1000"}, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 * gib}}, zone: "us-east-1a", sizeGiB: 4},
		{name: "no capabilities", req: &csi.CreateVolumeRequest{Name: "pvc-h"}, code: codes.InvalidArgument},
		{name: "no name", req: &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{mountRWO}}, code: codes.InvalidArgument},
		{name: "missing snapshot", req: &csi.CreateVolumeRequest{Name: "pvc-i", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-0123456789abcdef0"}}}},
			code: codes.NotFound},
		{name: "bigalloc on the default filesystem", req: &csi.CreateVolumeRequest{Name: "pvc-j", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{"ext4BigAlloc": "true", "Ext4ClusterSize": "16384"}}, zone: "us-east-1a", sizeGiB: DefaultVolumeSizeGiB,
			volCtx: map[string]string{ContextExt4BigAlloc: "true", ContextExt4ClusterSize: "16384"}},
		// The provisioner puts the class's filesystem (or its --default-fstype) in the capability.
		{name: "bigalloc where the capability asks for xfs", req: &csi.CreateVolumeRequest{Name: "pvc-k",
			VolumeCapabilities: []*csi.VolumeCapability{mountCap(FSXFS, rwo)}, Parameters: map[string]string{"ext4BigAlloc": "true"}},
			code: codes.InvalidArgument, errText: "ext4BigAlloc"},
		{name: "bigalloc where the capability asks for ext3", req: &csi.CreateVolumeRequest{Name: "pvc-l",
			VolumeCapabilities: []*csi.VolumeCapability{mountCap(FSExt3, rwo)}, Parameters: map[string]string{"ext4BigAlloc": "true"}},
			code: codes.InvalidArgument, errText: "ext3"},
		{name: "ext3", req: &csi.CreateVolumeRequest{Name: "pvc-m", VolumeCapabilities: []*csi.VolumeCapability{mountCap(FSExt3, rwo)},
			Parameters: map[string]string{ParamFSType: "ext3", "blockSize": "1024"}}, zone: "us-east-1a", sizeGiB: DefaultVolumeSizeGiB,
			volCtxFS: "ext3", volCtx: map[string]string{ContextBlockSize: "1024"}},
		// The provisioner's --extra-create-metadata: the claim reaches the node, which labels its metrics with it.
		{name: "claim in the volume context", req: &csi.CreateVolumeRequest{Name: "pvc-n", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			Parameters: map[string]string{ParamPVCName: "data-db-0", ParamPVCNamespace: "shop", ParamPVName: "pvc-n"}},
			zone: "us-east-1a", sizeGiB: DefaultVolumeSizeGiB,
			volCtx: map[string]string{ContextPVCNamespace: "shop", ContextPVCName: "data-db-0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.CreateVolume(ctx, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.errText) {
				t.Fatalf("err = %v, want %s containing %q", err, tc.code, tc.errText)
			}
			if tc.code != codes.OK {
				return
			}
			v := resp.GetVolume()
			seg := v.GetAccessibleTopology()[0].GetSegments()
			if seg[topology.ZoneKey] != tc.zone || seg[topology.WellKnownZoneKey] != tc.zone || v.GetCapacityBytes() != tc.sizeGiB*gib ||
				v.GetVolumeContext()[ParamFSType] != tc.volCtxFS {
				t.Errorf("volume = %+v", v)
			}
			for k, want := range tc.volCtx {
				if got := v.GetVolumeContext()[k]; got != want {
					t.Errorf("volume context %s = %q, want %q (all: %v)", k, got, want, v.GetVolumeContext())
				}
			}
		})
	}
}

func TestControllerCreateIsIdempotentAndTags(t *testing.T) {
	c, _ := newTestController(t)
	ctx := context.Background()
	req := &csi.CreateVolumeRequest{Name: "pvc-1234", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		Parameters: map[string]string{ParamPVCName: "data", ParamPVCNamespace: "db", ParamPVName: "pvc-1234", "tagSpecification_1": "team=storage"}}
	first, err := c.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateVolume(ctx, req)
	if err != nil || again.GetVolume().GetVolumeId() != first.GetVolume().GetVolumeId() {
		t.Fatalf("repeat = %v, %v; want %s", again, err, first.GetVolume().GetVolumeId())
	}
	bigger := &csi.CreateVolumeRequest{Name: req.Name, VolumeCapabilities: req.VolumeCapabilities, Parameters: req.Parameters,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 5 * gib}}
	if _, err := c.CreateVolume(ctx, bigger); status.Code(err) != codes.AlreadyExists {
		t.Errorf("same name, other size: %v, want AlreadyExists", err)
	}
	disk, err := c.cloud.GetDisk(ctx, first.GetVolume().GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"team": "storage", "kubernetes.io/created-for/pvc/name": "data",
		"kubernetes.io/created-for/pvc/namespace": "db", "kubernetes.io/created-for/pv/name": "pvc-1234"} {
		if disk.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, disk.Tags[k], v)
		}
	}
}

func TestControllerPublishRules(t *testing.T) {
	c, env := newTestController(t)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-pub", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	publish := func(node string) (*csi.ControllerPublishVolumeResponse, error) {
		return c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: mountRWO})
	}
	nodeA, nodeB := env.Instances["us-east-1a"], env.Instances["us-east-1b"]
	if _, err := publish(nodeB); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("publish across zones: %v, want FailedPrecondition", err)
	}
	if _, err := publish("i-0ffffffffffffffff"); status.Code(err) != codes.NotFound {
		t.Errorf("publish to unknown node: %v, want NotFound", err)
	}
	resp, err := publish(nodeA)
	if err != nil || !strings.HasPrefix(resp.GetPublishContext()[PublishDevicePath], "/dev/xvd") {
		t.Fatalf("publish = %v, %v", resp, err)
	}
	if again, err := publish(nodeA); err != nil || again.GetPublishContext()[PublishDevicePath] != resp.GetPublishContext()[PublishDevicePath] {
		t.Errorf("publish again = %v, %v; want the same device", again, err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete while published: %v, want FailedPrecondition", err)
	}
	for range 2 {
		if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA}); err != nil {
			t.Fatalf("unpublish: %v", err)
		}
	}
	for range 2 {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
}

func TestControllerAbortsDuplicates(t *testing.T) {
	c, _ := newTestController(t)
	ctx := context.Background()
	release, err := c.inFlight.hold(ctx, "volume", "vol-0123456789abcdef0")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "vol-0123456789abcdef0"}); status.Code(err) != codes.Aborted {
		t.Errorf("delete during another operation: %v, want Aborted", err)
	}
	if _, err := c.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "not-a-token"}); status.Code(err) != codes.Aborted {
		t.Errorf("invalid starting token: %v, want Aborted", err)
	}
}

func TestControllerExpandAndModify(t *testing.T) {
	c, _ := newTestController(t)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-grow", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		Parameters: map[string]string{"type": "gp3"}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	grown, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib}, VolumeCapability: mountRWO})
	if err != nil || grown.GetCapacityBytes() != 3*gib || !grown.GetNodeExpansionRequired() {
		t.Fatalf("expand = %v, %v", grown, err)
	}
	block := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}, AccessMode: mountRWO.AccessMode}
	grown, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * gib}, VolumeCapability: block})
	if err != nil || grown.GetNodeExpansionRequired() {
		t.Fatalf("block expand = %v, %v; a block volume needs no node expansion", grown, err)
	}
	if _, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"iops": "4000", "throughput": "250"}}); err != nil {
		t.Fatalf("modify: %v", err)
	}
	disk, err := c.cloud.GetDisk(ctx, id)
	if err != nil || disk.IOPS != 4000 || disk.Throughput != 250 || disk.SizeGiB != 10 {
		t.Errorf("after modify disk = %+v, %v", disk, err)
	}
	if _, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"encrypted": "true"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("immutable parameter: %v, want InvalidArgument", err)
	}
	// Beyond gp3's 64 TiB: the same code CreateVolume gives (CSI: OUT_OF_RANGE for both).
	if _, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 70000 * gib}}); status.Code(err) != codes.OutOfRange {
		t.Errorf("expand beyond the type's maximum: %v, want OutOfRange", err)
	}
	// Already as large: OK with the volume's size (the spec's SHOULD).
	if got, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 * gib}}); err != nil || got.GetCapacityBytes() != 10*gib {
		t.Errorf("expand to less than the volume's size = %v, %v; want OK with 10 GiB", got, err)
	}
}

// ec2Calls counts the EC2 calls fakecloud served, by action, from its /metrics.
func ec2Calls(t *testing.T, env *fakecloudtest.Env) map[string]float64 {
	t.Helper()
	resp, err := http.Get(env.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range families["diskforge_fakecloud_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "action" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestLearnZones: zones learnt at start are not asked again by CreateVolume; without it, the first CreateVolume
// asks, once.
func TestLearnZones(t *testing.T) {
	ctx := context.Background()
	for _, learn := range []bool{true, false} {
		c, env := newTestController(t)
		if learn {
			c.LearnZones(ctx)
		}
		before := ec2Calls(t, env)
		for _, name := range []string{"pvc-zones-1", "pvc-zones-2"} {
			if _, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
				AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1b")}}); err != nil {
				t.Fatal(err)
			}
		}
		want := 1.0
		if learn {
			want = 0
		}
		if n := ec2Calls(t, env)["DescribeAvailabilityZones"] - before["DescribeAvailabilityZones"]; n != want {
			t.Errorf("learnt at start %v: two CreateVolumes made %v DescribeAvailabilityZones calls, want %v", learn, n, want)
		}
	}
}

// TestControllerPublishCalls: a publish costs one (batched) DescribeVolumes and one AttachVolume, no
// DescribeInstances per publish; publishing again answers from the attachment read, with no AttachVolume.
func TestControllerPublishCalls(t *testing.T) {
	c, env := newTestController(t)
	ctx := context.Background()
	nodeA := env.Instances["us-east-1a"]
	var ids []string
	for _, name := range []string{"pvc-calls-1", "pvc-calls-2"} {
		vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1a")}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, vol.GetVolume().GetVolumeId())
	}
	publish := func(id string) string {
		t.Helper()
		resp, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: mountRWO})
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		return resp.GetPublishContext()[PublishDevicePath]
	}
	first := publish(ids[0])
	before := ec2Calls(t, env)
	second := publish(ids[1])
	after := ec2Calls(t, env)
	if first == second {
		t.Errorf("two volumes on one node got the same device %s", first)
	}
	if n := after["DescribeInstances"] - before["DescribeInstances"]; n != 0 {
		t.Errorf("a publish to a known node made %v DescribeInstances calls, want 0", n)
	}
	if n := after["AttachVolume"] - before["AttachVolume"]; n != 1 {
		t.Errorf("a publish made %v AttachVolume calls, want 1", n)
	}
	// The volume was seen available, unattached, when its CreateVolume ended: the publish takes that view
	// and reads nothing before attaching; its one DescribeVolumes is the attach's wait.
	if n := after["DescribeVolumes"] - before["DescribeVolumes"]; n != 1 {
		t.Errorf("a publish right after its CreateVolume made %v DescribeVolumes calls, want 1 (the attach's wait)", n)
	}
	if again := publish(ids[1]); again != second {
		t.Errorf("publish again gave %s, want %s", again, second)
	}
	if n := ec2Calls(t, env)["AttachVolume"] - after["AttachVolume"]; n != 0 {
		t.Errorf("an idempotent publish made %v AttachVolume calls, want 0", n)
	}
}

// TestControllerPublishOnAStaleView: a publish that takes the view its CreateVolume left, after the volume
// changed behind the driver's back, still gives the answer a fresh read would: AttachVolume answers for it.
func TestControllerPublishOnAStaleView(t *testing.T) {
	const otherNode = "i-0a000000000000009"
	cfg := fakecloud.DefaultCloud()
	cfg.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: "us-east-1a"}, {ID: otherNode, Zone: "us-east-1a"}}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cfg, NoSync: true})
	newCloud := func() *ec2cloud.Cloud {
		cl, err := ec2cloud.New(context.Background(), ec2cloud.Options{Endpoint: env.URL, Region: env.Region,
			AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
			Wait: ec2cloud.WaitOptions{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	c := NewControllerServer(newCloud())
	// Another client of the same cloud, whose calls the driver does not see.
	other := newCloud()
	ctx := context.Background()
	create := func(name string) string {
		vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1a")}})
		if err != nil {
			t.Fatal(err)
		}
		return vol.GetVolume().GetVolumeId()
	}
	publish := func(id string) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: fakecloudtest.InstanceA, VolumeCapability: mountRWO})
		return err
	}

	attachedElsewhere := create("pvc-stale-attached")
	if _, err := other.AttachDisk(ctx, attachedElsewhere, otherNode); err != nil {
		t.Fatal(err)
	}
	before := ec2Calls(t, env)
	if err := publish(attachedElsewhere); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("publish of a volume attached elsewhere since it was seen: %v, want FailedPrecondition", err)
	}
	// The publish did act on the stale view: a fresh read would have refused without an AttachVolume.
	if n := ec2Calls(t, env)["AttachVolume"] - before["AttachVolume"]; n != 1 {
		t.Errorf("the publish sent %v AttachVolume calls, want 1 (refused as VolumeInUse)", n)
	}
	deleted := create("pvc-stale-deleted")
	if err := other.DeleteDisk(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	// fakecloud removes a deleted volume's file on a worker, moments after DeleteVolume answers; until then the
	// volume is deleting, and a publish is told to come back (Aborted).
	fakecloudtest.WaitFor(t, 10*time.Second, "deleted volume gone", func(ctx context.Context) (bool, error) {
		_, err := other.GetDisk(ctx, deleted)
		return errors.Is(err, cloud.ErrNotFound), nil
	})
	if err := publish(deleted); status.Code(err) != codes.NotFound {
		t.Errorf("publish of a volume deleted since it was seen: %v, want NotFound", err)
	}
}

// TestControllerExpandAndModifyTogether: an expansion and a modification that meet on a volume become one
// ModifyVolume; a modification arriving while the previous one is still optimizing waits for it instead of
// being refused.
func TestControllerExpandAndModifyTogether(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{NoSync: true, Durations: state.Durations{Modifying: 100 * time.Millisecond, Optimizing: 300 * time.Millisecond},
		// A slow DescribeVolumes keeps the first request's round open while the second arrives.
		Faults: faults.Config{Latency: map[string]faults.Duration{"DescribeVolumes": faults.Duration(50 * time.Millisecond)}}})
	cl, err := ec2cloud.New(context.Background(), ec2cloud.Options{Endpoint: env.URL, Region: env.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait: ec2cloud.WaitOptions{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewControllerServer(cl)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-together", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		Parameters: map[string]string{"type": "gp3"}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	before := ec2Calls(t, env)
	var wg sync.WaitGroup
	var expandErr, modifyErr error
	wg.Go(func() {
		_, expandErr = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * gib}, VolumeCapability: mountRWO})
	})
	wg.Go(func() {
		_, modifyErr = c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
			MutableParameters: map[string]string{"iops": "4000"}})
	})
	wg.Wait()
	if expandErr != nil || modifyErr != nil {
		t.Fatalf("expand: %v; modify: %v", expandErr, modifyErr)
	}
	if n := ec2Calls(t, env)["ModifyVolume"] - before["ModifyVolume"]; n != 1 {
		t.Errorf("expand and modify together made %v ModifyVolume calls, want 1", n)
	}
	// The modification is optimizing now; the next one waits for it to complete.
	if _, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
		MutableParameters: map[string]string{"throughput": "300"}}); err != nil {
		t.Fatalf("modify while optimizing: %v, want it to wait", err)
	}
	after := ec2Calls(t, env)
	if n := after["ModifyVolume"] - before["ModifyVolume"]; n != 2 {
		t.Errorf("ModifyVolume calls = %v, want 2 (none refused)", n)
	}
	disk, err := cl.GetDisk(ctx, id)
	if err != nil || disk.SizeGiB != 8 || disk.IOPS != 4000 || disk.Throughput != 300 {
		t.Errorf("disk = %+v, %v; want 8 GiB, 4000 IOPS, 300 MiB/s", disk, err)
	}
}

// TestControllerClone: a volume content source is copied in its own zone, with at least its size; requirements
// that exclude its zone, a smaller capacity and a missing source are refused before any disk is made.
func TestControllerClone(t *testing.T) {
	c, env := newTestController(t)
	ctx := context.Background()
	src, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-src", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1b")}})
	if err != nil {
		t.Fatal(err)
	}
	from := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	srcID := src.GetVolume().GetVolumeId()
	cases := []struct {
		name    string
		req     *csi.CreateVolumeRequest
		code    codes.Code
		sizeGiB int64
	}{
		{"clone in the source's zone, its size", &csi.CreateVolumeRequest{Name: "pvc-clone", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from(srcID), AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a", "us-east-1b"),
				Preferred: zoneReq("us-east-1a")}}, codes.OK, 3},
		{"larger clone", &csi.CreateVolumeRequest{Name: "pvc-clone-5", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from(srcID), CapacityRange: &csi.CapacityRange{RequiredBytes: 5 * gib}}, codes.OK, 5},
		{"requirements exclude the source's zone", &csi.CreateVolumeRequest{Name: "pvc-clone-a", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from(srcID), AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a")}}, codes.InvalidArgument, 0},
		{"smaller than the source", &csi.CreateVolumeRequest{Name: "pvc-clone-1", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from(srcID), CapacityRange: &csi.CapacityRange{RequiredBytes: gib, LimitBytes: 2 * gib}}, codes.OutOfRange, 0},
		{"missing source", &csi.CreateVolumeRequest{Name: "pvc-clone-x", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from("vol-0123456789abcdef0")}, codes.NotFound, 0},
		{"malformed source", &csi.CreateVolumeRequest{Name: "pvc-clone-y", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: from("../etc")}, codes.NotFound, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.CreateVolume(ctx, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.code != codes.OK {
				return
			}
			v := resp.GetVolume()
			if v.GetAccessibleTopology()[0].GetSegments()[topology.ZoneKey] != "us-east-1b" || v.GetCapacityBytes() != tc.sizeGiB*gib ||
				v.GetContentSource().GetVolume().GetVolumeId() != srcID {
				t.Errorf("clone %+v", v)
			}
		})
	}
	out, err := env.EC2(t).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil || len(out.Volumes) != 3 {
		t.Errorf("%d volumes (%v), want the source and two clones", len(out.Volumes), err)
	}
}

// TestControllerIOPSPerGB: iopsPerGB as the EBS driver applies it, seen on the disk fakecloud made; a class
// naming no type makes gp3.
func TestControllerIOPSPerGB(t *testing.T) {
	c, env := newTestController(t)
	ec2c := env.EC2(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		params   map[string]string
		sizeGiB  int64
		wantType string
		wantIOPS int32
		code     codes.Code
	}{
		{name: "no type: gp3", sizeGiB: 10, wantType: "gp3", wantIOPS: 3000},
		{name: "capped at io1's 50 per GiB", params: map[string]string{"type": "io1", "iopsPerGB": "80"}, sizeGiB: 100, wantType: "io1", wantIOPS: 5000},
		{name: "raised to gp3's minimum", params: map[string]string{"iopsPerGB": "10", "allowAutoIOPSPerGBIncrease": "true"}, sizeGiB: 100,
			wantType: "gp3", wantIOPS: 3000},
		{name: "below gp3's minimum", params: map[string]string{"iopsPerGB": "10"}, sizeGiB: 100, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + strings.ReplaceAll(tc.name, " ", "-"),
				VolumeCapabilities: []*csi.VolumeCapability{mountRWO}, Parameters: tc.params,
				CapacityRange: &csi.CapacityRange{RequiredBytes: tc.sizeGiB * gib}})
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.code != codes.OK {
				return
			}
			out, err := ec2c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{resp.GetVolume().GetVolumeId()}})
			if err != nil {
				t.Fatal(err)
			}
			v := out.Volumes[0]
			if string(v.VolumeType) != tc.wantType || aws.ToInt32(v.Iops) != tc.wantIOPS {
				t.Errorf("disk %s with %d IOPS, want %s with %d", v.VolumeType, aws.ToInt32(v.Iops), tc.wantType, tc.wantIOPS)
			}
		})
	}
}
