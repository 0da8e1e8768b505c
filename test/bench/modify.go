package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
)

// modifyResult is one driver's run of the resize scenario: per volume, ControllerExpandVolume and
// ControllerModifyVolume at once (as the resizer sends them when a PVC's size and VolumeAttributesClass
// change together), then another ControllerModifyVolume while that modification is still optimizing.
type modifyResult struct {
	Driver  string             `json:"driver"`
	Volumes int                `json:"volumes"`
	Errors  map[string]int     `json:"errorsByCode"`
	Calls   map[string]float64 `json:"modifyCallsPerVolume"`
	// Refused counts ModifyVolume calls EC2 refused because a modification was in progress.
	Refused    float64                 `json:"refusedModifyVolume"`
	Latency    map[string]latencyStats `json:"latency"`
	WallSecond float64                 `json:"wallSeconds"`
}

func runModify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("modify", flag.ExitOnError)
	binDir := fs.String("bin", "bin", "directory of the fakecloud and driver binaries")
	drivers := fs.String("drivers", "", "drivers to compare as NAME=PATH,… (default: current=<bin>/driver)")
	volumes := fs.Int("volumes", 20, "volumes resized in parallel")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *drivers == "" {
		*drivers = "current=" + filepath.Join(*binDir, "driver")
	}
	enc := json.NewEncoder(os.Stdout)
	for _, item := range strings.Split(*drivers, ",") {
		name, path, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("--drivers: %q is not NAME=PATH", item)
		}
		r, err := modifyRun(ctx, filepath.Join(*binDir, "fakecloud"), name, path, *volumes)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func modifyRun(ctx context.Context, fakecloud, name, driver string, volumes int) (*modifyResult, error) {
	dir, err := os.MkdirTemp("", "diskforge-bench-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pr := &procs{dir: dir}
	defer pr.stop()
	url, err := pr.startFakecloud(ctx, fakecloud, "--create-duration", "0s", "--modifying-duration", "300ms", "--optimizing-duration", "1s")
	if err != nil {
		return nil, err
	}
	conn, err := pr.startDriver(ctx, driver, "--mode", "controller", "--cloud-endpoint", url, "--region", "us-east-1")
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctrl := csi.NewControllerClient(conn)
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	ids := make([]string, volumes)
	for i := range ids {
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-resize-%04d", i),
			CapacityRange: &csi.CapacityRange{RequiredBytes: 10 << 30}, VolumeCapabilities: []*csi.VolumeCapability{capability},
			Parameters: map[string]string{"type": "gp3"}})
		if err != nil {
			return nil, fmt.Errorf("CreateVolume: %w", grpcErr(err))
		}
		ids[i] = resp.GetVolume().GetVolumeId()
	}
	before, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	r := &modifyResult{Driver: name, Volumes: volumes, Errors: map[string]int{}, Calls: map[string]float64{}, Latency: map[string]latencyStats{}}
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	record := func(rpc string, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		lat[rpc] = append(lat[rpc], d)
		if err != nil {
			r.Errors[status.Code(err).String()]++
		}
	}
	timed := func(rpc string, call func() error) {
		t := time.Now()
		err := call()
		record(rpc, time.Since(t), err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			var both sync.WaitGroup
			both.Go(func() {
				timed("ControllerExpandVolume", func() error {
					_, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
						CapacityRange: &csi.CapacityRange{RequiredBytes: 20 << 30}, VolumeCapability: capability})
					return err
				})
			})
			both.Go(func() {
				timed("ControllerModifyVolume", func() error {
					_, err := ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
						MutableParameters: map[string]string{"iops": "4000"}})
					return err
				})
			})
			both.Wait()
			timed("ControllerModifyVolume (next)", func() error {
				_, err := ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
					MutableParameters: map[string]string{"throughput": "250"}})
				return err
			})
		})
	}
	wg.Wait()
	r.WallSecond = round(time.Since(start).Seconds())
	after, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"ModifyVolume", "DescribeVolumes", "DescribeVolumesModifications"} {
		r.Calls[k] = round((after[k] - before[k]) / float64(volumes))
	}
	r.Refused = after["ModifyVolume/IncorrectModificationState"] - before["ModifyVolume/IncorrectModificationState"]
	for rpc, d := range lat {
		r.Latency[rpc] = percentiles(d)
	}
	return r, nil
}
