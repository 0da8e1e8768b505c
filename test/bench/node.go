package main

import (
	"cmp"
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
// devices, in the same rounds as the other drivers of the run. Two hand runs are the baselines: mkfs then
// mount(8), as a person types it, and mkfs then mount(2) called directly, the fastest anyone could do.
type nodeResult struct {
	Driver        string     `json:"driver"`
	FSType        string     `json:"fsType"`
	SizeGiB       int        `json:"sizeGiB"`
	Runs          int        `json:"runs"`
	StageMedianMS float64    `json:"stageMedianMs"`
	StageMS       []float64  `json:"stageMs"`
	Baselines     []baseline `json:"baselines"`
}

// baseline is one hand run and the driver's stage against it.
type baseline struct {
	Command  string    `json:"command"`
	MedianMS float64   `json:"medianMs"`
	MS       []float64 `json:"ms"`
	// OverheadMS is what the driver adds: the stage's median less this baseline's.
	OverheadMS float64 `json:"overheadMs"`
	Ratio      float64 `json:"ratio"`
	// PairRatio is the median over the rounds of the ratio of the stage to this hand run of the same round:
	// steadier than Ratio on a machine whose load drifts between rounds.
	PairRatio float64 `json:"pairRatio"`
}

// handRun is a baseline's way of mounting: by mount(8), or by mount(2) from this process.
type handRun struct {
	command string
	mount   func(fsType, dev, target, opts string) error
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
		args := []string{"--mode", "node", "--instance-id", "i-0be00000000000bench", "--zone", "us-east-1a",
			"--max-volumes-per-node", "16", fmt.Sprintf("-v=%d", *verbosity)}
		if hasFlag(d.path, "state-dir") {
			// Its records of unfinished mkfs runs in the run's directory, not under the host's kubelet directory.
			args = append(args, "--state-dir", filepath.Join(pr.dir, "state"))
		}
		conn, err := pr.startDriver(ctx, d.path, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		defer func() { _ = conn.Close() }()
		stagers = append(stagers, stageDriver{d.name, csi.NewNodeClient(conn)})
	}
	b := &nodeBench{dir: dir}
	defer b.cleanup()
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
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

// compare runs, in each round, each hand run and every driver's NodeStageVolume, each on a fresh blank device;
// the kind that goes first moves by one each round, so none always runs on a quiet machine.
func (b *nodeBench) compare(ctx context.Context, fsType string, sizeGiB, runs int, drivers []stageDriver) ([]*nodeResult, error) {
	mkfs, data := []string{"-F", "-m0"}, ""
	if fsType == "xfs" {
		// What the driver runs: mount-utils' mkfs flags, and nouuid (restored snapshots share their UUID).
		mkfs, data = []string{"-f"}, "nouuid"
	}
	mkfsCommand := fmt.Sprintf("mkfs.%s %s DEV", fsType, strings.Join(mkfs, " "))
	hands := []handRun{
		{fmt.Sprintf("%s && mount -t %s -o %s DEV DIR", mkfsCommand, fsType, cmp.Or(data, "defaults")),
			func(fsType, dev, target, opts string) error {
				return run("mount", "-t", fsType, "-o", cmp.Or(opts, "defaults"), dev, target)
			}},
		{fmt.Sprintf("%s && mount(2) %s DEV DIR %q", mkfsCommand, fsType, data),
			func(fsType, dev, target, opts string) error {
				if err := unix.Mount(dev, target, fsType, 0, opts); err != nil {
					return fmt.Errorf("mount(2) %s on %s: %w", dev, target, err)
				}
				return nil
			}},
	}
	kinds := len(hands) + len(drivers)
	took := make([][]float64, kinds)
	for round := range runs {
		for j := range kinds {
			kind := (j + round) % kinds
			var t float64
			var err error
			if kind < len(hands) {
				t, err = b.timeOne(fsType, sizeGiB, func(_, dev, target string) error {
					if err := run("mkfs."+fsType, append(slices.Clone(mkfs), dev)...); err != nil {
						return err
					}
					return hands[kind].mount(fsType, dev, target, data)
				})
			} else {
				d := drivers[kind-len(hands)]
				t, err = b.timeOne(fsType, sizeGiB, func(id, _, target string) error { return stage(ctx, d, id, target, fsType) })
			}
			if err != nil {
				return nil, err
			}
			took[kind] = append(took[kind], t)
		}
	}
	var out []*nodeResult
	for i, d := range drivers {
		st := took[len(hands)+i]
		r := &nodeResult{Driver: d.name, FSType: fsType, SizeGiB: sizeGiB, Runs: runs, StageMS: st, StageMedianMS: median(st)}
		for h, hand := range hands {
			raw := took[h]
			pairs := make([]float64, runs)
			for k := range pairs {
				pairs[k] = st[k] / raw[k]
			}
			r.Baselines = append(r.Baselines, baseline{Command: hand.command, MS: raw, MedianMS: median(raw),
				OverheadMS: round(r.StageMedianMS - median(raw)), Ratio: round(r.StageMedianMS / median(raw)), PairRatio: round(median(pairs))})
		}
		out = append(out, r)
	}
	return out, nil
}

// stage asks the driver to stage the volume, whose device it finds itself (by the loop device's backing file).
func stage(ctx context.Context, d stageDriver, volumeID, target, fsType string) error {
	_, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: volumeID, StagingTargetPath: target,
		PublishContext: map[string]string{"devicePath": "/dev/xvdaa"},
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}})
	if err != nil {
		return fmt.Errorf("%s: NodeStageVolume: %w", d.name, grpcErr(err))
	}
	return nil
}

// timeOne formats and mounts a fresh blank device with do and returns how long that took in ms. The device is
// released and its writes synced before it returns.
func (b *nodeBench) timeOne(fsType string, sizeGiB int, do func(volumeID, dev, target string) error) (float64, error) {
	id, dev, err := b.blankDevice(sizeGiB)
	if err != nil {
		return 0, err
	}
	target := filepath.Join(b.dir, "mnt-"+id)
	if err := os.MkdirAll(target, 0o750); err != nil {
		return 0, err
	}
	start := time.Now()
	err = do(id, dev, target)
	took := ms(time.Since(start))
	b.mnts = append(b.mnts, target)
	if err := errors.Join(err, b.release()); err != nil {
		return 0, fmt.Errorf("%s: %w", fsType, err)
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

// hasFlag reports whether the binary takes the flag (drivers from before it was added are compared too). The
// flag package lists a flag as "  -name type" or, for a boolean, "  -name" alone on its line.
func hasFlag(binary, name string) bool {
	out, _ := exec.Command(binary, "-h").CombinedOutput()
	return flagListed(string(out), name)
}

func flagListed(help, name string) bool {
	for _, line := range strings.Split(help, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "-"+name {
			return true
		}
	}
	return false
}
