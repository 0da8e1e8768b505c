package fakecloud_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

func describeInstance(t *testing.T, c *ec2.Client, id string) types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatalf("DescribeInstances %s: %v", id, err)
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances %s: %+v", id, out.Reservations)
	}
	return out.Reservations[0].Instances[0]
}

func waitInstance(t *testing.T, c *ec2.Client, id string, want types.InstanceStateName) types.Instance {
	t.Helper()
	var in types.Instance
	fakecloudtest.WaitFor(t, 10*time.Second, string(want)+" "+id, func(context.Context) (bool, error) {
		in = describeInstance(t, c, id)
		return in.State.Name == want, nil
	})
	return in
}

// instancesNamed lists the instances a state filter selects.
func instancesNamed(t *testing.T, c *ec2.Client, filter string, values ...string) []string {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String(filter), Values: values}}})
	if err != nil {
		t.Fatalf("DescribeInstances %s=%v: %v", filter, values, err)
	}
	var ids []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
	}
	slices.Sort(ids)
	return ids
}

func checkChange(t *testing.T, what string, got []types.InstanceStateChange, id string, prev, cur types.InstanceStateName, prevCode, curCode int32) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%s: %d state changes", what, len(got))
	}
	g := got[0]
	if aws.ToString(g.InstanceId) != id || g.PreviousState.Name != prev || aws.ToInt32(g.PreviousState.Code) != prevCode ||
		g.CurrentState.Name != cur || aws.ToInt32(g.CurrentState.Code) != curCode {
		t.Errorf("%s: %s %s(%d) → %s(%d), want %s %s(%d) → %s(%d)", what, aws.ToString(g.InstanceId),
			g.PreviousState.Name, aws.ToInt32(g.PreviousState.Code), g.CurrentState.Name, aws.ToInt32(g.CurrentState.Code),
			id, prev, prevCode, cur, curCode)
	}
}

// TestInstanceLifecycleSDK drives stop, start and terminate through the real SDK: EC2's reply shape and codes,
// DescribeInstances' state, reasons and state filters, and the terminated instance staying visible.
func TestInstanceLifecycleSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	a, b := env.Instances[zoneA], env.Instances[zoneB]

	stop, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "stop", stop.StoppingInstances, a, types.InstanceStateNameRunning, types.InstanceStateNameStopping, 16, 64)
	in := waitInstance(t, c, a, types.InstanceStateNameStopped)
	if aws.ToInt32(in.State.Code) != 80 || in.StateReason == nil || aws.ToString(in.StateReason.Code) != "Client.UserInitiatedShutdown" ||
		!strings.HasPrefix(aws.ToString(in.StateTransitionReason), "User initiated (") {
		t.Errorf("stopped instance: state %+v, reason %+v, transition %q", in.State, in.StateReason, aws.ToString(in.StateTransitionReason))
	}
	again, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}, Force: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "stop of a stopped instance", again.StoppingInstances, a, types.InstanceStateNameStopped, types.InstanceStateNameStopped, 80, 80)
	if got := instancesNamed(t, c, "instance-state-name", "stopped"); !slices.Equal(got, []string{a}) {
		t.Errorf("instance-state-name=stopped: %v", got)
	}
	if got := instancesNamed(t, c, "instance-state-code", "80"); !slices.Equal(got, []string{a}) {
		t.Errorf("instance-state-code=80: %v", got)
	}
	if got := instancesNamed(t, c, "instance-state-name", "run*"); slices.Contains(got, a) || !slices.Contains(got, b) {
		t.Errorf("instance-state-name=run*: %v", got)
	}

	start, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "start", start.StartingInstances, a, types.InstanceStateNameStopped, types.InstanceStateNamePending, 80, 0)
	if in := waitInstance(t, c, a, types.InstanceStateNameRunning); in.StateReason != nil {
		t.Errorf("running instance has a state reason %+v", in.StateReason)
	}

	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "terminate", term.TerminatingInstances, a, types.InstanceStateNameRunning, types.InstanceStateNameShuttingDown, 16, 32)
	waitInstance(t, c, a, types.InstanceStateNameTerminated)
	term, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	checkChange(t, "terminate again", term.TerminatingInstances, a, types.InstanceStateNameTerminated, types.InstanceStateNameTerminated, 48, 48)
	if got := instancesNamed(t, c, "instance-state-name", "terminated"); !slices.Equal(got, []string{a}) {
		t.Errorf("instance-state-name=terminated: %v", got)
	}
}

// TestInstanceErrorsSDK: bad input gets EC2's plain answers, and changes nothing.
func TestInstanceErrorsSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	a := env.Instances[zoneA]
	unknown := "i-0badc0ffee0000000"
	cases := []struct {
		name string
		call func() error
		code string
	}{
		{"terminate unknown", func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{unknown}})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"terminate known and unknown", func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a, unknown}})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"stop malformed", func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{"node-1"}})
			return err
		}, "InvalidInstanceID.Malformed"},
		{"start unknown", func() error {
			_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{unknown}})
			return err
		}, "InvalidInstanceID.NotFound"},
		{"stop dry run", func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"terminate dry run", func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a}, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"hibernate", func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}, Hibernate: aws.Bool(true)})
			return err
		}, "UnsupportedOperation"},
		{"modify an attribute not modelled", func() error {
			_, err := c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: &a,
				InstanceType: &types.AttributeValue{Value: aws.String("m5.xlarge")}})
			return err
		}, "UnsupportedOperation"},
		{"modify an unmapped device", func() error {
			_, err := c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: &a,
				BlockDeviceMappings: []types.InstanceBlockDeviceMappingSpecification{{DeviceName: aws.String("/dev/xvdbq"),
					Ebs: &types.EbsInstanceBlockDeviceSpecification{DeleteOnTermination: aws.Bool(true)}}}})
			return err
		}, "InvalidInstanceAttributeValue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); codeOf(err) != tc.code {
				t.Errorf("err = %v, want %s", err, tc.code)
			}
		})
	}
	if in := describeInstance(t, c, a); in.State.Name != types.InstanceStateNameRunning {
		t.Errorf("refused requests left the instance %s", in.State.Name)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	waitInstance(t, c, a, types.InstanceStateNameTerminated)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{a}}); codeOf(err) != "IncorrectInstanceState" {
		t.Errorf("start of a terminated instance: %v, want IncorrectInstanceState", err)
	}
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}}); codeOf(err) != "IncorrectInstanceState" {
		t.Errorf("stop of a terminated instance: %v, want IncorrectInstanceState", err)
	}
	_, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: &a, Device: aws.String("/dev/xvdba")})
	if codeOf(err) != "IncorrectInstanceState" {
		t.Errorf("attach to a terminated instance: %v, want IncorrectInstanceState", err)
	}
}

// TestInstanceVolumesSDK: volumes of a stopped instance stay attached; one can be attached to it and detached
// from it; termination ends every attachment, deleting the DeleteOnTermination volume.
func TestInstanceVolumesSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	a := env.Instances[zoneA]
	kept := availableVolume(t, c, &ec2.CreateVolumeInput{})
	doomed := availableVolume(t, c, &ec2.CreateVolumeInput{})
	late := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, kept, a, "/dev/xvdba")
	attached(t, c, doomed, a, "/dev/xvdbb")
	if _, err := c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: &a,
		BlockDeviceMappings: []types.InstanceBlockDeviceMappingSpecification{{DeviceName: aws.String("/dev/xvdbb"),
			Ebs: &types.EbsInstanceBlockDeviceSpecification{DeleteOnTermination: aws.Bool(true)}}}}); err != nil {
		t.Fatal(err)
	}
	if v := describeVolume(t, c, doomed); !aws.ToBool(v.Attachments[0].DeleteOnTermination) {
		t.Errorf("DescribeVolumes DeleteOnTermination %+v", v.Attachments[0])
	}
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	in := waitInstance(t, c, a, types.InstanceStateNameStopped)
	for _, m := range in.BlockDeviceMappings {
		if m.Ebs.Status != types.AttachmentStatusAttached || aws.ToBool(m.Ebs.DeleteOnTermination) != (aws.ToString(m.Ebs.VolumeId) == doomed) {
			t.Errorf("stopped instance's mapping %s: %+v", aws.ToString(m.DeviceName), m.Ebs)
		}
	}
	if len(in.BlockDeviceMappings) != 2 {
		t.Errorf("stopped instance maps %d volumes, want 2", len(in.BlockDeviceMappings))
	}
	if v := describeVolume(t, c, kept); v.State != types.VolumeStateInUse || v.Attachments[0].State != types.VolumeAttachmentStateAttached {
		t.Errorf("volume of a stopped instance: %s %+v", v.State, v.Attachments)
	}
	attached(t, c, late, a, "/dev/xvdbc")
	if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &late}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, late)

	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	waitInstance(t, c, a, types.InstanceStateNameTerminated)
	waitDetached(t, c, kept)
	waitGone(t, c, doomed)
	if in := describeInstance(t, c, a); len(in.BlockDeviceMappings) != 0 {
		t.Errorf("terminated instance maps %+v", in.BlockDeviceMappings)
	}
}

// adminFaults PUTs a fault config through the admin API, as an e2e scenario does, and returns the live one.
func adminFaults(t *testing.T, env *fakecloudtest.Env, method, body string) faults.Config {
	t.Helper()
	req, _ := http.NewRequest(method, env.URL+"/admin/faults", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /admin/faults %s: %d %s", method, body, resp.StatusCode, raw)
	}
	var cfg faults.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStuckAttachmentCountSDK: attach:1 set at run time holds the next attachment attaching (whatever the time),
// a forced detach frees the volume, and the attach retried after it proceeds, as a driver that aborts a stuck
// attachment and attaches again needs.
func TestStuckAttachmentCountSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	a := env.Instances[zoneA]
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	if cfg := adminFaults(t, env, http.MethodPut, `{"stuck":["attach:1"]}`); !slices.Equal(cfg.Stuck, []string{"attach:1"}) {
		t.Fatalf("live stuck %q", cfg.Stuck)
	}
	if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: &a, Device: aws.String("/dev/xvdba")}); err != nil {
		t.Fatal(err)
	}
	if cfg := adminFaults(t, env, http.MethodGet, ""); len(cfg.Stuck) != 0 {
		t.Errorf("the hold was taken, yet stuck shows %q", cfg.Stuck)
	}
	// Another volume attached meanwhile proceeds.
	other := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, other, a, "/dev/xvdbb")
	for range 5 {
		if v := describeVolume(t, c, vol); v.Attachments[0].State != types.VolumeAttachmentStateAttaching {
			t.Fatalf("held attachment moved to %s", v.Attachments[0].State)
		}
	}
	d, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &vol, InstanceId: &a, Force: aws.Bool(true)})
	if err != nil || d.State != types.VolumeAttachmentStateDetaching {
		t.Fatalf("forced detach of the held attachment: %+v, %v", d, err)
	}
	waitDetached(t, c, vol)
	attached(t, c, vol, a, "/dev/xvdba")
}

// TestInstanceStateAfterRestart: a stopped instance is still stopped after fakecloud restarts, with its volume.
func TestInstanceStateAfterRestart(t *testing.T) {
	dir := t.TempDir()
	first := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c := first.EC2(t)
	a := first.Instances[zoneA]
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, vol, a, "/dev/xvdba")
	if _, err := c.StopInstances(context.Background(), &ec2.StopInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c = second.EC2(t)
	if in := describeInstance(t, c, a); in.State.Name != types.InstanceStateNameStopped {
		t.Errorf("after a restart the instance is %s, want stopped", in.State.Name)
	}
	if v := describeVolume(t, c, vol); v.State != types.VolumeStateInUse || v.Attachments[0].State != types.VolumeAttachmentStateAttached {
		t.Errorf("after a restart its volume is %s %+v", v.State, v.Attachments)
	}
}

// TestTerminateReleasesLoopDevice: on loop devices, termination releases the device of a volume still mounted on
// the instance, as a forced detach does.
func TestTerminateReleasesLoopDevice(t *testing.T) {
	env := startLoopCloud(t, fakecloud.BackendLoop)
	c := env.EC2(t)
	a := env.Instances[zoneA]
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	attached(t, c, vol, a, "/dev/xvdba")
	dev := env.Server.Backend.DevicePath(vol)
	if dev == "" {
		t.Fatal("no loop device")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if _, err := c.TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, vol)
	waitInstance(t, c, a, types.InstanceStateNameTerminated)
	if got := env.Server.Backend.DevicePath(vol); got != "" {
		t.Errorf("volume still bound to %s after termination", got)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
}
