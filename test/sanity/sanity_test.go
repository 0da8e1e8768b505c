// Package sanity runs csi-sanity against the real driver on a unix socket, backed by an in-process fakecloud on
// real loop devices through the real SDK, with real mounts.
package sanity_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// want is what each variant's csi-sanity run reports when the driver works: pinned, so that a spec that starts
// skipping (a capability lost, a test option no longer set) or stops being counted fails CI as a failure would.
// The 7 skipped specs are the services the driver does not offer (GetCapacity, volume health,
// NodeGetStorageHealth, snapshot accessibility constraints, ControllerPublishVolume's readonly); the pending one
// is csi-sanity's own (ListVolumes pagination while volumes change). Update it with the reasons a run prints.
var want = map[string]specCounts{
	"ext4":  {passed: 95, skipped: 7, pending: 1},
	"xfs":   {passed: 95, skipped: 7, pending: 1},
	"block": {passed: 95, skipped: 7, pending: 1},
}

// specCounts are the outcomes of a run's specs; failed counts every failure state (failed, panicked, timed
// out, interrupted, aborted).
type specCounts struct{ passed, failed, skipped, pending int }

func (c specCounts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped, %d pending", c.passed, c.failed, c.skipped, c.pending)
}

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
			report := filepath.Join(t.TempDir(), "report.json")
			cmd := exec.Command(os.Args[0], "-test.run=^TestSanity$", "-test.v", "-test.timeout=15m", "-ginkgo.no-color",
				"-ginkgo.json-report="+report)
			cmd.Env = append(os.Environ(), modeEnv+"="+v)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			runErr := cmd.Run()
			specs, err := readReport(report)
			if err != nil {
				t.Fatalf("csi-sanity %s: %v (run: %v); output:\n%s", v, err, runErr, tail(out.String(), 300))
			}
			got := countSpecs(specs)
			t.Logf("csi-sanity %s: %s in %s", v, got, time.Since(start).Round(time.Millisecond))
			if runErr != nil || got != want[v] {
				t.Errorf("csi-sanity %s: %s, want %s (run: %v)\n%soutput:\n%s", v, got, want[v], runErr,
					notPassed(specs), tail(out.String(), 300))
			}
		})
	}
}

// specReport is the part of a ginkgo JSON report's spec that the test reads.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string
	Failure                 struct{ Message string }
}

// readReport reads the specs (It nodes) of the JSON report ginkgo wrote for one suite run.
func readReport(file string) ([]specReport, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var suites []struct{ SpecReports []specReport }
	if err := json.Unmarshal(raw, &suites); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(suites) != 1 {
		return nil, fmt.Errorf("%s: %d suites, want 1", file, len(suites))
	}
	var specs []specReport
	for _, s := range suites[0].SpecReports {
		if s.LeafNodeType == "It" {
			specs = append(specs, s)
		}
	}
	return specs, nil
}

func countSpecs(specs []specReport) specCounts {
	var c specCounts
	for _, s := range specs {
		switch s.State {
		case "passed":
			c.passed++
		case "skipped":
			c.skipped++
		case "pending":
			c.pending++
		default:
			c.failed++
		}
	}
	return c
}

// notPassed lists the specs that did not pass, with ginkgo's message (a skip's reason, a failure's cause).
func notPassed(specs []specReport) string {
	var b strings.Builder
	for _, s := range specs {
		if s.State != "passed" {
			name := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
			msg, _, _ := strings.Cut(s.Failure.Message, "\n")
			fmt.Fprintf(&b, "  %s: %s: %s\n", s.State, name, msg)
		}
	}
	return b.String()
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
	ctrl := driver.NewControllerServer(c)
	srv := driver.NewGRPCServer(driver.Services{
		Identity:        driver.NewIdentityServer("disk.csi.diskforge.io", "sanity", true, nil),
		Controller:      ctrl,
		GroupController: driver.NewGroupControllerServer(ctrl),
		Node:            node,
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
