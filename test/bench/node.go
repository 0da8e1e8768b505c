package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// nodeResult compares one driver's NodeStageVolume with the same mkfs and mount run by hand, on identical blank
// devices, in the same rounds as the other drivers of the run.
type nodeResult struct {
	Driver  string `json:"driver"`
	FSType  string `json:"fsType"`
	SizeGiB int    `json:"sizeGiB"`
	Runs    int    `json:"runs"`
	// RawCommand is what was run by hand: the driver's mkfs and mount.
	RawCommand    string  `json:"rawCommand"`
	RawMedianMS   float64 `json:"rawMedianMs"`
	StageMedianMS float64 `json:"stageMedianMs"`
	Ratio         float64 `json:"ratio"`
	// PairRatio is the median over the rounds of the ratio of this driver's stage to the hand run of the same
	// round: steadier than Ratio on a machine whose load drifts between rounds.
	PairRatio float64   `json:"pairRatio"`
	RawMS     []float64 `json:"rawMs"`
	StageMS   []float64 `json:"stageMs"`
}

// stageDriver is one driver under test, serving the node RPCs.
type stageDriver struct {
	name string
	node csi.NodeClient
}

type nodeBench struct {
	dir   string
	loops []string
	mnts  []string
	seq   int
}

func runNode(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	binDir := fs.String("bin", "bin", "directory of the driver binary")
	drivers := fs.String("drivers", "", driversFlagHelp)
	runs := fs.Int("runs", 5, "rounds per filesystem; each round runs the commands by hand once and every driver's stage once")
	sizeGiB := fs.Int("size", 1, "volume size in GiB")
	fsTypes := fs.String("fs", "ext4,xfs", "filesystems")
	verbosity := fs.Int("v", 0, "the drivers' log verbosity")
	keep := fs.Bool("keep", false, "keep the drivers' logs (the directory is printed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the node benchmark needs root (loop devices, mkfs, mount)")
	}
	for _, tool := range []string{"losetup", "mount", "umount", "mkfs.ext4", "mkfs.xfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is needed: %w", tool, err)
		}
	}
	bins, err := parseDrivers(*drivers, *binDir)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "diskforge-nodebench-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "bench: logs in", dir)
	} else {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	var stagers []stageDriver
	for _, d := range bins {
		// Each driver in a directory of its own: its socket and its log.
		pr := &procs{dir: filepath.Join(dir, d.name)}
		defer pr.stop()
		if err := os.Mkdir(pr.dir, 0o700); err != nil {
			return err
		}
		conn, err := pr.startDriver(ctx, d.path, "--mode", "node", "--instance-id", "i-0be00000000000bench", "--zone", "us-east-1a",
			"--max-volumes-per-node", "16", fmt.Sprintf("-v=%d", *verbosity))
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		defer func() { _ = conn.Close() }()
		stagers = append(stagers, stageDriver{d.name, csi.NewNodeClient(conn)})
	}
	b := &nodeBench{dir: dir}
	defer b.cleanup()
	enc := json.NewEncoder(os.Stdout)
	for _, fsType := range strings.Split(*fsTypes, ",") {
		results, err := b.compare(ctx, fsType, *sizeGiB, *runs, stagers)
		if err != nil {
			return fmt.Errorf("%s: %w", fsType, err)
		}
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// compare runs, in each round, the mkfs and mount by hand and every driver's NodeStageVolume, each on a fresh
// blank device; the kind that goes first moves by one each round, so none always runs on a quiet machine.
func (b *nodeBench) compare(ctx context.Context, fsType string, sizeGiB, runs int, drivers []stageDriver) ([]*nodeResult, error) {
	mkfs, mountOpts := []string{"-F", "-m0"}, "defaults"
	if fsType == "xfs" {
		// What the driver runs: mount-utils' mkfs flags, and nouuid (restored snapshots share their UUID).
		mkfs, mountOpts = []string{"-f"}, "nouuid,defaults"
	}
	rawCommand := fmt.Sprintf("mkfs.%s %s DEV && mount -t %s -o %s DEV DIR", fsType, strings.Join(mkfs, " "), fsType, mountOpts)
	var raw []float64
	stage := make([][]float64, len(drivers))
	for round := range runs {
		// Kind 0 is the hand run, kind i driver i-1.
		for j := range len(drivers) + 1 {
			kind := (j + round) % (len(drivers) + 1)
			var stager *stageDriver
			if kind > 0 {
				stager = &drivers[kind-1]
			}
			took, err := b.timeOne(ctx, fsType, sizeGiB, mkfs, mountOpts, stager)
			if err != nil {
				return nil, err
			}
			if stager == nil {
				raw = append(raw, took)
			} else {
				stage[kind-1] = append(stage[kind-1], took)
			}
		}
	}
	var out []*nodeResult
	for i, d := range drivers {
		r := &nodeResult{Driver: d.name, FSType: fsType, SizeGiB: sizeGiB, Runs: runs, RawCommand: rawCommand,
			RawMS: raw, StageMS: stage[i], RawMedianMS: median(raw), StageMedianMS: median(stage[i])}
		r.Ratio = round(r.StageMedianMS / r.RawMedianMS)
		pairs := make([]float64, runs)
		for k := range pairs {
			pairs[k] = stage[i][k] / raw[k]
		}
		r.PairRatio = round(median(pairs))
		out = append(out, r)
	}
	return out, nil
}

// timeOne formats and mounts a fresh blank device, by hand (stager nil) or through the stager's NodeStageVolume,
// and returns how long that took in ms. The device is released and its writes synced before it returns.
func (b *nodeBench) timeOne(ctx context.Context, fsType string, sizeGiB int, mkfs []string, mountOpts string, stager *stageDriver) (float64, error) {
	id, dev, err := b.blankDevice(sizeGiB)
	if err != nil {
		return 0, err
	}
	target := filepath.Join(b.dir, "mnt-"+id)
	if err := os.MkdirAll(target, 0o750); err != nil {
		return 0, err
	}
	start := time.Now()
	if stager == nil {
		err = run("mkfs."+fsType, append(slices.Clone(mkfs), dev)...)
		if err == nil {
			err = run("mount", "-t", fsType, "-o", mountOpts, dev, target)
		}
	} else {
		_, err = stager.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: target,
			PublishContext: map[string]string{"devicePath": "/dev/xvdaa"},
			VolumeCapability: &csi.VolumeCapability{
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}})
		if err != nil {
			err = fmt.Errorf("%s: NodeStageVolume: %w", stager.name, grpcErr(err))
		}
	}
	took := ms(time.Since(start))
	b.mnts = append(b.mnts, target)
	if err := errors.Join(err, b.release()); err != nil {
		return 0, err
	}
	// The released device's writes reach the disk now, not during the next run: on a small VM their writeback
	// doubled some runs of either kind.
	unix.Sync()
	return took, nil
}

// blankDevice makes a sparse file named like fakecloud's volumes (<volume ID>.img, which the node plugin
// finds through the loop device's backing file) and binds a loop device to it.
func (b *nodeBench) blankDevice(sizeGiB int) (id, dev string, err error) {
	b.seq++
	id = fmt.Sprintf("vol-0be%014d", b.seq)
	file := filepath.Join(b.dir, id+".img")
	f, err := os.Create(file)
	if err != nil {
		return "", "", err
	}
	err = errors.Join(f.Truncate(int64(sizeGiB)<<30), f.Close())
	if err != nil {
		return "", "", err
	}
	out, err := exec.Command("losetup", "--find", "--show", file).Output()
	if err != nil {
		return "", "", fmt.Errorf("losetup %s: %w", file, err)
	}
	dev = strings.TrimSpace(string(out))
	b.loops = append(b.loops, dev)
	return id, dev, nil
}

// release unmounts what this benchmark mounted and frees its loop devices; it touches nothing else.
func (b *nodeBench) release() error {
	var errs []error
	for _, m := range b.mnts {
		if err := run("umount", m); err != nil {
			errs = append(errs, err)
		}
	}
	b.mnts = nil
	for _, l := range b.loops {
		if err := run("losetup", "-d", l); err != nil {
			errs = append(errs, err)
		}
	}
	b.loops = nil
	return errors.Join(errs...)
}

func (b *nodeBench) cleanup() {
	if err := b.release(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
	}
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
