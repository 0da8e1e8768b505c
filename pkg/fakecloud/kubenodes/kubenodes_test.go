package kubenodes_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/kubenodes"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/topology"
)

const waitTime = 10 * time.Second

// startCloud is a fakecloud with the default zones and no instances; dataDir reuses a previous one's state.
func startCloud(t *testing.T, dataDir string) *fakecloudtest.Env {
	t.Helper()
	cloud := fakecloud.DefaultCloud()
	return fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud, DataDir: dataDir})
}

// run runs a controller until the returned stop is called (or the test ends).
func run(t *testing.T, client kubernetes.Interface, cloud kubenodes.Cloud, opts kubenodes.Options) (stop func()) {
	t.Helper()
	c, err := kubenodes.New(client, cloud, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func node(name, uid string, labels map[string]string, providerID string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), Labels: labels},
		Spec: corev1.NodeSpec{ProviderID: providerID}}
}

// labeled waits until every named node carries the instance ID, zone and type labels, and returns them.
func labeled(t *testing.T, client kubernetes.Interface, names ...string) map[string]*corev1.Node {
	t.Helper()
	out := map[string]*corev1.Node{}
	for _, name := range names {
		fakecloudtest.WaitFor(t, waitTime, "labels on node "+name, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			out[name] = n
			return n.Labels[topology.InstanceIDLabel] != "" && n.Labels[topology.WellKnownZoneKey] != "" &&
				n.Labels[topology.InstanceTypeLabel] != "", nil
		})
	}
	return out
}

// instance is the instance fakecloud holds under id.
func instance(t *testing.T, s *state.State, id string) state.InstanceView {
	t.Helper()
	views, _, err := s.DescribeInstances(state.DescribeInput{IDs: []string{id}})
	if err != nil || len(views) != 1 {
		t.Fatalf("DescribeInstances(%s) = %v, %v", id, views, err)
	}
	return views[0]
}

func allInstances(t *testing.T, s *state.State) []state.InstanceView {
	t.Helper()
	views, _, err := s.DescribeInstances(state.DescribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	return views
}

// TestNodesBecomeInstances: Nodes without identity, control plane included, become running instances spread
// over the configured zones, with the instance ID, zone and type written back to them; a Node joining later
// goes to the emptiest zone.
func TestNodesBecomeInstances(t *testing.T) {
	e := startCloud(t, "")
	client := fake.NewSimpleClientset(
		node("control-plane", "uid-cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, "kind://docker/kind/control-plane"),
		node("worker", "uid-w1", nil, "kind://docker/kind/worker"),
		node("worker2", "uid-w2", nil, ""),
		node("worker3", "uid-w3", nil, ""),
	)
	run(t, client, e.Server.State, kubenodes.Options{})
	names := []string{"control-plane", "worker", "worker2", "worker3"}
	nodes := labeled(t, client, names...)
	perZone := map[string]int{}
	for _, name := range names {
		n := nodes[name]
		id, zone := n.Labels[topology.InstanceIDLabel], n.Labels[topology.WellKnownZoneKey]
		if want := kubenodes.InstanceID(n); id != want {
			t.Errorf("node %s: instance ID %s, want %s", name, id, want)
		}
		if got := n.Labels[topology.InstanceTypeLabel]; got != kubenodes.DefaultInstanceType {
			t.Errorf("node %s: type label %q, want %s", name, got, kubenodes.DefaultInstanceType)
		}
		in := instance(t, e.Server.State, id)
		if in.Zone != zone || in.InstanceType != kubenodes.DefaultInstanceType || in.State != state.InstanceRunning {
			t.Errorf("node %s: instance %+v, want running %s in %s", name, in.Instance, kubenodes.DefaultInstanceType, zone)
		}
		perZone[zone]++
	}
	if want := map[string]int{"us-east-1a": 2, "us-east-1b": 2}; !maps.Equal(perZone, want) {
		t.Errorf("nodes per zone %v, want %v", perZone, want)
	}
	if got := len(allInstances(t, e.Server.State)); got != len(names) {
		t.Errorf("%d instances, want %d", got, len(names))
	}

	if _, err := client.CoreV1().Nodes().Create(context.Background(), node("worker4", "uid-w4", nil, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	late := labeled(t, client, "worker4")["worker4"]
	if zone := late.Labels[topology.WellKnownZoneKey]; zone != "us-east-1a" {
		t.Errorf("a node joining 2+2 nodes went to %s, want the first listed zone us-east-1a", zone)
	}
	instance(t, e.Server.State, late.Labels[topology.InstanceIDLabel])
}

// TestNodeKeepsItsIdentity: what a Node says of itself (labels, an aws provider ID) is the instance, and its
// labels stay as they were.
func TestNodeKeepsItsIdentity(t *testing.T) {
	tests := []struct {
		name       string
		labels     map[string]string
		providerID string
		want       state.InstanceSpec
	}{
		{"provider-id", nil, "aws:///us-east-1c/i-0123456789abcdef0",
			state.InstanceSpec{ID: "i-0123456789abcdef0", Zone: "us-east-1c", InstanceType: kubenodes.DefaultInstanceType}},
		{"labels", map[string]string{topology.InstanceIDLabel: "i-0fedcba9876543210", topology.WellKnownZoneKey: "us-east-1b",
			topology.InstanceTypeLabel: "c5.xlarge"}, "kind://docker/kind/labels",
			state.InstanceSpec{ID: "i-0fedcba9876543210", Zone: "us-east-1b", InstanceType: "c5.xlarge"}},
		{"driver-zone-and-beta-type", map[string]string{topology.ZoneKey: "us-east-1c", topology.BetaInstanceTypeLabel: "m5.xlarge"}, "",
			state.InstanceSpec{Zone: "us-east-1c", InstanceType: "m5.xlarge"}},
	}
	e := startCloud(t, "")
	client := fake.NewSimpleClientset()
	for i, tc := range tests {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), node(tc.name, fmt.Sprint("uid-", i), maps.Clone(tc.labels), tc.providerID),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, client, e.Server.State, kubenodes.Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := labeled(t, client, tc.name)[tc.name]
			want := tc.want
			if want.ID == "" {
				want.ID = kubenodes.InstanceID(n)
			}
			in := instance(t, e.Server.State, want.ID)
			if in.Zone != want.Zone || in.InstanceType != want.InstanceType {
				t.Errorf("instance %s in %s of type %s, want %+v", in.ID, in.Zone, in.InstanceType, want)
			}
			for k, v := range tc.labels {
				if n.Labels[k] != v {
					t.Errorf("label %s = %q, was %q", k, n.Labels[k], v)
				}
			}
			if got := n.Labels[topology.InstanceIDLabel]; got != want.ID {
				t.Errorf("instance-id label %q, want %s", got, want.ID)
			}
		})
	}
}

// TestDeletedNodeTerminates: the instance of a deleted Node terminates and its volume comes off it.
func TestDeletedNodeTerminates(t *testing.T) {
	e := startCloud(t, "")
	client := fake.NewSimpleClientset(node("worker", "uid-w", nil, ""), node("other", "uid-o", nil, ""))
	run(t, client, e.Server.State, kubenodes.Options{})
	nodes := labeled(t, client, "worker", "other")
	id, zone := nodes["worker"].Labels[topology.InstanceIDLabel], nodes["worker"].Labels[topology.WellKnownZoneKey]

	ec2c := e.EC2(t)
	ctx := context.Background()
	vol, err := ec2c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zone), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	volumeState := func(want ec2types.VolumeState) {
		t.Helper()
		fakecloudtest.WaitFor(t, waitTime, "volume "+string(want), func(ctx context.Context) (bool, error) {
			out, err := ec2c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*vol.VolumeId}})
			return err == nil && out.Volumes[0].State == want, err
		})
	}
	volumeState(ec2types.VolumeStateAvailable)
	if _, err := ec2c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: vol.VolumeId, InstanceId: aws.String(id), Device: aws.String("/dev/xvdba")}); err != nil {
		t.Fatal(err)
	}
	volumeState(ec2types.VolumeStateInUse)

	if err := client.CoreV1().Nodes().Delete(ctx, "worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	volumeState(ec2types.VolumeStateAvailable)
	fakecloudtest.WaitFor(t, waitTime, "instance terminated", func(context.Context) (bool, error) {
		return instance(t, e.Server.State, id).State == state.InstanceTerminated, nil
	})
	if in := instance(t, e.Server.State, nodes["other"].Labels[topology.InstanceIDLabel]); in.State != state.InstanceRunning {
		t.Errorf("the other node's instance is %s", in.State)
	}
}

// TestRestart: a new controller over the same (restarted) fakecloud, whose Nodes lost their labels and whose
// zone list is in another order, registers the same instances again: no new ones, same IDs, zones and launch
// times.
func TestRestart(t *testing.T) {
	e := startCloud(t, "")
	names := []string{"a", "b", "c"}
	var objs []*corev1.Node
	for _, name := range names {
		objs = append(objs, node(name, "uid-"+name, nil, ""))
	}
	client := fake.NewSimpleClientset(objs[0], objs[1], objs[2])
	stop := run(t, client, e.Server.State, kubenodes.Options{Zones: []string{"us-east-1a", "us-east-1b", "us-east-1c"}})
	labeled(t, client, names...)
	before := allInstances(t, e.Server.State)
	stop()
	e.Close()

	e = startCloud(t, e.DataDir)
	client = fake.NewSimpleClientset(objs[0], objs[1], objs[2])
	run(t, client, e.Server.State, kubenodes.Options{Zones: []string{"us-east-1c", "us-east-1b", "us-east-1a"}})
	nodes := labeled(t, client, names...)
	after := allInstances(t, e.Server.State)
	if len(after) != len(before) {
		t.Fatalf("%d instances after the restart, %d before", len(after), len(before))
	}
	for i, b := range before {
		a := after[i]
		if a.ID != b.ID || a.Zone != b.Zone || !a.LaunchTime.Equal(b.LaunchTime) || a.State != state.InstanceRunning {
			t.Errorf("instance after the restart %+v, before %+v", a.Instance, b.Instance)
		}
	}
	for _, n := range nodes {
		if in := instance(t, e.Server.State, n.Labels[topology.InstanceIDLabel]); in.Zone != n.Labels[topology.WellKnownZoneKey] {
			t.Errorf("node %s labelled zone %s, its instance is in %s", n.Name, n.Labels[topology.WellKnownZoneKey], in.Zone)
		}
	}
}

// TestInstanceThroughEC2API: the instance of a Node is what DescribeInstances answers, zone and type included.
func TestInstanceThroughEC2API(t *testing.T) {
	e := startCloud(t, "")
	client := fake.NewSimpleClientset(node("worker", "uid-w", map[string]string{topology.InstanceTypeLabel: "c5.large"}, ""))
	run(t, client, e.Server.State, kubenodes.Options{Zones: []string{"us-east-1b"}})
	n := labeled(t, client, "worker")["worker"]
	out, err := e.EC2(t).DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: []string{n.Labels[topology.InstanceIDLabel]}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances = %+v", out.Reservations)
	}
	in := out.Reservations[0].Instances[0]
	if aws.ToString(in.Placement.AvailabilityZone) != "us-east-1b" || in.InstanceType != "c5.large" || in.State.Name != ec2types.InstanceStateNameRunning {
		t.Errorf("instance in %s of type %s, %s; want running c5.large in us-east-1b", aws.ToString(in.Placement.AvailabilityZone), in.InstanceType, in.State.Name)
	}
}

// TestOptionsChecked: zones the cloud lacks and unknown types are refused at start.
func TestOptionsChecked(t *testing.T) {
	e := startCloud(t, "")
	for _, opts := range []kubenodes.Options{{Zones: []string{"eu-west-1a"}}, {InstanceType: "z9.huge"}} {
		if _, err := kubenodes.New(fake.NewSimpleClientset(), e.Server.State, opts); err == nil {
			t.Errorf("New(%+v) succeeded", opts)
		}
	}
}

// TestReplacedNode: a Node deleted and created again under the same name (a new UID) is a new machine: the old
// instance terminates, a new one runs, and the new Node is labelled with it.
func TestReplacedNode(t *testing.T) {
	e := startCloud(t, "")
	client := fake.NewSimpleClientset(node("worker", "uid-old", nil, ""))
	run(t, client, e.Server.State, kubenodes.Options{})
	oldID := labeled(t, client, "worker")["worker"].Labels[topology.InstanceIDLabel]

	ctx := context.Background()
	if err := client.CoreV1().Nodes().Delete(ctx, "worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node("worker", "uid-new", nil, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := labeled(t, client, "worker")["worker"]
	newID := n.Labels[topology.InstanceIDLabel]
	if newID == oldID || newID != kubenodes.InstanceID(n) {
		t.Fatalf("the new node's instance is %s (old %s), want %s", newID, oldID, kubenodes.InstanceID(n))
	}
	fakecloudtest.WaitFor(t, waitTime, "old instance terminated", func(context.Context) (bool, error) {
		return instance(t, e.Server.State, oldID).State == state.InstanceTerminated, nil
	})
	if in := instance(t, e.Server.State, newID); in.State != state.InstanceRunning {
		t.Errorf("the new node's instance is %s", in.State)
	}
}
