// Package sanity runs csi-sanity against the real driver on a unix socket, backed by an in-process fakecloud on
// real loop devices through the real SDK, with real mounts.
package sanity_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/driver"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// modeEnv selects the variant a child process runs. Ginkgo allows one suite run per process, so TestSanity
// runs each variant in a child process of this test binary, which runs TestSanity again with modeEnv set.
const modeEnv = "DISKFORGE_SANITY_MODE"

// variants are the sanity runs: a filesystem for each supported type, and raw block.
var variants = []string{"ext4", "xfs", "block"}

// nodeLimit is the instance's attachment limit, reported by the node so that the limit spec can reach it.
const nodeLimit = 6

var summary = regexp.MustCompile(`Ran (\d+) of (\d+) Specs.*\n.*?(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped`)

func TestSanity(t *testing.T) {
	if v := os.Getenv(modeEnv); v != "" {
		runVariant(t, v)
		return
	}
	testutil.SkipUnless(t, blockdev.Available(), "csi-sanity runs on real loop devices: needs root and /dev/loop-control")
	testutil.RequireTools(t, "mkfs.ext4", "mkfs.xfs", "resize2fs", "xfs_growfs", "blkid")
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			start := time.Now()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSanity$", "-test.v", "-test.timeout=15m", "-ginkgo.no-color")
			cmd.Env = append(os.Environ(), modeEnv+"="+v)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			m := summary.FindStringSubmatch(out.String())
			if m != nil {
				t.Logf("csi-sanity %s: ran %s of %s specs: %s passed, %s failed, %s pending, %s skipped in %s",
					v, m[1], m[2], m[3], m[4], m[5], m[6], time.Since(start).Round(time.Millisecond))
			}
			if err != nil || m == nil || m[4] != "0" {
				t.Errorf("csi-sanity %s failed (%v); output:\n%s", v, err, tail(out.String(), 300))
			}
		})
	}
}

func tail(s string, lines int) string {
	var all []string
	sc := bufio.NewScanner(bytes.NewBufferString(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	var b bytes.Buffer
	for _, l := range all {
		fmt.Fprintln(&b, l)
	}
	return b.String()
}

// runVariant is one sanity run, in a child process of TestSanity.
func runVariant(t *testing.T, variant string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cloudCfg := fakecloud.DefaultCloud()
	const instance = "i-0sanity0000000001"
	cloudCfg.Instances = []state.InstanceSpec{{ID: instance, Zone: "us-east-1a", AttachmentLimit: nodeLimit}}
	// Short but real asynchronous transitions, so the driver's waits are exercised.
	d := 20 * time.Millisecond
	env := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendLoop, Cloud: &cloudCfg,
		Durations: state.Durations{VolumeCreate: d, VolumeDelete: d, Attach: d, Detach: d, Modifying: d, Optimizing: d, Snapshot: d}})
	t.Cleanup(func() { releaseDevices(t, env) })

	c, err := ec2cloud.New(ctx, ec2cloud.Options{Endpoint: env.URL, Region: env.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait: ec2cloud.WaitOptions{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	node, err := driver.NewNodeServer(driver.NodeOptions{InstanceID: instance, Zone: "us-east-1a", MaxVolumesPerNode: nodeLimit})
	if err != nil {
		t.Fatal(err)
	}
	srv := driver.NewGRPCServer(driver.Services{
		Identity:   driver.NewIdentityServer("disk.csi.diskforge.io", "sanity", true, nil),
		Controller: driver.NewControllerServer(c),
		Node:       node,
	}, nil)
	dir := t.TempDir()
	t.Cleanup(func() { testutil.UnmountUnder(t, dir) })
	sock := filepath.Join(dir, "csi.sock")
	lis, err := driver.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = driver.Serve(ctx, srv, lis, time.Second) }()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.IdempotentCount = 3
	cfg.TestVolumeSize = 1 << 30
	cfg.TestVolumeExpandSize = 2 << 30
	cfg.TestNodeVolumeAttachLimit = true
	cfg.TestVolumeParameters = map[string]string{"type": "gp3"}
	cfg.TestVolumeMutableParameters = map[string]string{"iops": "3000", "throughput": "250"}
	switch variant {
	case "block":
		cfg.TestVolumeAccessType = "block"
	default:
		cfg.TestVolumeParameters[driver.ParamFSType] = variant
	}
	sanity.Test(t, cfg)
}

// releaseDevices force-detaches every loop device the run's fakecloud still holds, whatever the suite left.
func releaseDevices(t *testing.T, env *fakecloudtest.Env) {
	vols, _, err := env.Server.State.DescribeVolumes(state.DescribeInput{})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	for _, v := range vols {
		if env.Server.Backend.DevicePath(v.ID) != "" {
			if err := env.Server.Backend.Detach(context.Background(), v.ID, true); err != nil {
				t.Logf("cleanup: detach %s: %v", v.ID, err)
			}
		}
	}
}
