package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// Nodes of the node-life cloud: two in zone A, each holding at most two volumes.
const (
	lifeNode1 = "i-0a000000000000001"
	lifeNode2 = "i-0a000000000000002"
)

// lifeDriver is the controller served over gRPC on a unix socket (behind the driver's interceptors), against
// a fakecloud reached through a recording proxy.
type lifeDriver struct {
	csi.ControllerClient
	env *fakecloudtest.Env
	log *fakecloudtest.RequestLog
}

// newLifeDriver stands the controller up with the stuck bound and fakecloud's initial faults.
func newLifeDriver(t *testing.T, bound time.Duration, f faults.Config, d state.Durations) *lifeDriver {
	t.Helper()
	cfg := fakecloud.DefaultCloud()
	cfg.Instances = []state.InstanceSpec{{ID: lifeNode1, Zone: "us-east-1a", AttachmentLimit: 2}, {ID: lifeNode2, Zone: "us-east-1a", AttachmentLimit: 2}}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cfg, NoSync: true, Faults: f, Durations: d})
	log, endpoint := fakecloudtest.RecordingProxy(t, env.URL)
	c, err := ec2cloud.New(context.Background(), ec2cloud.Options{Endpoint: endpoint, Region: env.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait:               ec2cloud.WaitOptions{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		AttachStuckTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	conn := serveSocket(t, Services{Controller: NewControllerServer(c)})
	return &lifeDriver{ControllerClient: csi.NewControllerClient(conn), env: env, log: log}
}

func (d *lifeDriver) create(t *testing.T, name string) string {
	t.Helper()
	resp, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}

func (d *lifeDriver) publish(volumeID, nodeID string) (*csi.ControllerPublishVolumeResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, VolumeCapability: mountRWO})
}

func (d *lifeDriver) unpublish(volumeID, nodeID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID})
	return err
}

// instanceState is the node's state in fakecloud, "" once it is gone.
func (d *lifeDriver) instanceState(ctx context.Context, t *testing.T, id string) (string, error) {
	out, err := d.env.EC2(t).DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: []string{id}}}})
	if err != nil {
		return "", err
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			return string(in.State.Name), nil
		}
	}
	return "", nil
}

// lose moves a node through EC2's API (stop, terminate) and waits until fakecloud reports it in want.
func (d *lifeDriver) lose(t *testing.T, id, how, want string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch how {
	case "stop":
		_, err = d.env.EC2(t).StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Force: aws.Bool(true)})
	case "terminate":
		_, err = d.env.EC2(t).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	case "forget":
		err = d.env.Server.State.RemoveInstance(id)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", how, id, err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, id+" "+want, func(ctx context.Context) (bool, error) {
		st, err := d.instanceState(ctx, t, id)
		return err == nil && st == want, err
	})
}

// TestControllerPublishStuckAttachment drives ControllerPublishVolume over gRPC against fakecloud's counted
// stuck fault with a 2 s bound: one stuck attachment is force-detached and made again within the call; two
// give a retryable Unavailable, and the next publish, once the fault is used up, succeeds.
func TestControllerPublishStuckAttachment(t *testing.T) {
	cases := []struct {
		stuck string
		// codes are the answers of the publishes made until one succeeds.
		codes            []codes.Code
		attaches, forced int
	}{
		{stuck: "attach:1", codes: []codes.Code{codes.OK}, attaches: 2, forced: 1},
		{stuck: "attach:2", codes: []codes.Code{codes.Unavailable, codes.OK}, attaches: 3, forced: 2},
	}
	for _, tc := range cases {
		t.Run(tc.stuck, func(t *testing.T) {
			d := newLifeDriver(t, 2*time.Second, faults.Config{Stuck: []string{tc.stuck}}, state.Durations{})
			vol := d.create(t, "pvc-stuck")
			var resp *csi.ControllerPublishVolumeResponse
			for i, want := range tc.codes {
				var err error
				resp, err = d.publish(vol, lifeNode1)
				if status.Code(err) != want {
					t.Fatalf("publish %d: %v, want %s", i+1, err, want)
				}
				if want == codes.Unavailable && !strings.Contains(status.Convert(err).Message(), "still attaching") {
					t.Errorf("publish %d: message %q does not say the attachment is still attaching", i+1, status.Convert(err).Message())
				}
			}
			if got := d.log.Count("AttachVolume"); got != tc.attaches {
				t.Errorf("fakecloud saw %d AttachVolume, want %d", got, tc.attaches)
			}
			if got, all := d.log.Count("DetachVolume", "Force=true"), d.log.Count("DetachVolume"); got != tc.forced || all != tc.forced {
				t.Errorf("fakecloud saw %d DetachVolume, %d forced; want %d, all forced", all, got, tc.forced)
			}
			dev := resp.GetPublishContext()[PublishDevicePath]
			out, err := d.env.EC2(t).DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{VolumeIds: []string{vol}})
			if err != nil || len(out.Volumes) != 1 || len(out.Volumes[0].Attachments) != 1 {
				t.Fatalf("DescribeVolumes = %+v, %v", out, err)
			}
			if a := out.Volumes[0].Attachments[0]; aws.ToString(a.Device) != dev || a.State != ec2types.VolumeAttachmentStateAttached {
				t.Errorf("fakecloud attachment %s %s, want attached as %s", aws.ToString(a.Device), a.State, dev)
			}
		})
	}
}

// TestControllerNodeLife: publish and unpublish over gRPC while nodes stop, end and vanish.
func TestControllerNodeLife(t *testing.T) {
	cases := []struct {
		name string
		// how the node holding the volume is lost ("stop", "terminate", "forget"), and its state after.
		how, state string
		// durations of the cloud: a long InstanceTerminate keeps a terminated node shutting down.
		durations state.Durations
		faults    faults.Config
		// publishElsewhere is the answer to publishing the volume to the other node before the unpublish;
		// publishToLost the answer to publishing another volume to the lost node.
		publishElsewhere, publishToLost codes.Code
		// message is what publishElsewhere's message says of the lost node.
		message string
	}{
		{name: "stopped", how: "stop", state: "stopped", publishElsewhere: codes.FailedPrecondition, publishToLost: codes.OK,
			message: "which is stopped"},
		{name: "shutting down", how: "terminate", state: "shutting-down", durations: state.Durations{InstanceTerminate: time.Hour},
			// The termination's detach held still: the attachment outlives the instance for a while, as on EC2.
			faults:           faults.Config{Stuck: []string{faults.TransitionDetach}},
			publishElsewhere: codes.FailedPrecondition, publishToLost: codes.NotFound, message: "which is shutting-down"},
		{name: "terminated", how: "terminate", state: "terminated", publishElsewhere: codes.OK, publishToLost: codes.NotFound},
		{name: "gone", how: "forget", state: "", publishElsewhere: codes.OK, publishToLost: codes.NotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newLifeDriver(t, 0, faults.Config{}, tc.durations)
			vol, other := d.create(t, "pvc-life"), d.create(t, "pvc-life-other")
			if _, err := d.publish(vol, lifeNode2); err != nil {
				t.Fatal(err)
			}
			if err := d.env.Server.Faults.SetConfig(tc.faults); err != nil {
				t.Fatal(err)
			}
			d.lose(t, lifeNode2, tc.how, tc.state)

			_, err := d.publish(vol, lifeNode1)
			if status.Code(err) != tc.publishElsewhere || !strings.Contains(status.Convert(err).Message(), tc.message) {
				t.Errorf("publish elsewhere while attached to a %s node: %v, want %s saying %q", tc.name, err, tc.publishElsewhere, tc.message)
			}
			if status.Code(err) == codes.FailedPrecondition && !strings.Contains(status.Convert(err).Message(), lifeNode2) {
				t.Errorf("message %q does not name the node %s", status.Convert(err).Message(), lifeNode2)
			}
			if _, err := d.publish(other, lifeNode2); status.Code(err) != tc.publishToLost {
				t.Errorf("publish to a %s node: %v, want %s", tc.name, err, tc.publishToLost)
			}
			// The termination's detach goes on (an unpublish waits for a detach EC2 has already started).
			if err := d.env.Server.Faults.SetConfig(faults.Config{}); err != nil {
				t.Fatal(err)
			}
			// Unpublishing from the lost node succeeds, and again (already detached).
			for i := range 2 {
				if err := d.unpublish(vol, lifeNode2); err != nil {
					t.Fatalf("unpublish %d from a %s node: %v", i+1, tc.name, err)
				}
			}
			fakecloudtest.WaitFor(t, 10*time.Second, "publish elsewhere after the unpublish", func(context.Context) (bool, error) {
				_, err := d.publish(vol, lifeNode1)
				return err == nil, err
			})
		})
	}
}

// TestControllerPublishBeyondLimit: an attach beyond the node's limit is ResourceExhausted (kubelet then
// refreshes its CSINode count); unknown nodes stay NotFound and unpublish from them succeeds.
func TestControllerPublishBeyondLimit(t *testing.T) {
	d := newLifeDriver(t, 0, faults.Config{}, state.Durations{})
	for i, name := range []string{"pvc-limit-1", "pvc-limit-2", "pvc-limit-3"} {
		vol := d.create(t, name)
		_, err := d.publish(vol, lifeNode1)
		want := codes.OK
		if i == 2 {
			want = codes.ResourceExhausted
		}
		if status.Code(err) != want {
			t.Fatalf("publish %d to a node that holds 2: %v, want %s", i+1, err, want)
		}
		if want == codes.ResourceExhausted && !strings.Contains(status.Convert(err).Message(), "AttachmentLimitExceeded") {
			t.Errorf("message %q does not carry EC2's code", status.Convert(err).Message())
		}
	}
	vol := d.create(t, "pvc-limit-unknown")
	if _, err := d.publish(vol, "i-0a0000000000000ff"); status.Code(err) != codes.NotFound {
		t.Errorf("publish to an unknown node: %v, want NotFound", err)
	}
	if err := d.unpublish(vol, "i-0a0000000000000ff"); err != nil {
		t.Errorf("unpublish from an unknown node: %v", err)
	}
}
