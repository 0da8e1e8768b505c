package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// fuseBench compares fakecloud's block backends as a cluster sees them, through the driver's CSI socket: per
// round, each backend in turn (the first one moving each round) gets a fresh fakecloud and driver, stages
// blank volumes (mkfs + mount), and runs a pod's I/O on a published volume. Then, per backend, fakecloud's
// memory with many volumes attached, staged and all doing I/O at once.
type fuseBench struct {
	fakecloud, driver string
	backends          []string
	runs              int
	fsTypes           []string
	ioFS              string
	stages            int
	sizeGiB           int
	io                podIO
	rss               rssOptions
	keep              bool
	verbosity         int
	dir               string
}

// rssOptions are the memory measurement's: Volumes attached to instances of PerInstance each, each with a
// file of FileMiB written and then Seconds of 4 KiB random reads and writes.
type rssOptions struct {
	Backends    []string
	Volumes     int
	PerInstance int
	FileMiB     int
	Seconds     int
	SyncEvery   int
}

// runResult is one backend's run of one round.
type runResult struct {
	Backend string               `json:"backend"`
	Run     int                  `json:"run"`
	StageMS map[string][]float64 `json:"stageMs"`
	IOFS    string               `json:"ioFsType"`
	IO      []ioSample           `json:"io"`
}

// rssResult is fakecloud's memory on one backend with many volumes in use, in MiB.
type rssResult struct {
	Backend   string `json:"backend"`
	Volumes   int    `json:"volumes"`
	Instances int    `json:"instances"`
	// IdleMiB is VmRSS once started, StagedMiB with every volume attached, staged and mounted before the I/O,
	// IOPeakMiB the highest VmRSS sampled every 100 ms during it, and HWMMiB the kernel's VmHWM at its end:
	// the peak of the whole run, the mkfs runs of staging included.
	IdleMiB      float64 `json:"idleRssMiB"`
	StagedMiB    float64 `json:"stagedRssMiB"`
	IOPeakMiB    float64 `json:"ioPeakRssMiB"`
	HWMMiB       float64 `json:"vmHwmMiB"`
	SetupSeconds float64 `json:"setupSeconds"`
	IOSeconds    float64 `json:"ioSeconds"`
	Ops          int64   `json:"ops"`
	FakecloudCPU float64 `json:"fakecloudCpuSeconds"`
}

func runFuse(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fuse", flag.ExitOnError)
	binDir := fs.String("bin", "bin", "directory of the fakecloud and driver binaries")
	backends := fs.String("backends", "loop,fuse", "fakecloud backends to compare, side by side in each round")
	b := &fuseBench{}
	fs.IntVar(&b.runs, "runs", 3, "rounds; each runs every backend once, the first one moving each round")
	fsTypes := fs.String("fs", "ext4,xfs", "filesystems NodeStageVolume makes")
	fs.StringVar(&b.ioFS, "io-fs", "ext4", "filesystem the pod's I/O runs on")
	fs.IntVar(&b.stages, "stages", 3, "volumes staged per filesystem, backend and round")
	fs.IntVar(&b.sizeGiB, "size", 1, "volume size in GiB")
	ioMiB := fs.Int("io-mib", 256, "size of the file the pod writes and reads, in MiB")
	fs.IntVar(&b.io.RandReads, "rand-reads", 20000, "4 KiB random reads per random-read workload")
	fs.IntVar(&b.io.RandWrites, "rand-writes", 4096, "4 KiB random writes")
	fs.IntVar(&b.io.SyncEvery, "sync-every", 16, "random writes between fdatasyncs (a database committing 64 KiB at a time)")
	rssBackends := fs.String("rss-backends", "loop,fuse", "backends whose memory is measured with --rss-volumes volumes (empty: none)")
	fs.IntVar(&b.rss.Volumes, "rss-volumes", 100, "volumes attached, staged and doing I/O at once for the memory measurement")
	fs.IntVar(&b.rss.PerInstance, "rss-per-instance", 25, "volumes per instance (EC2's m5.large holds 26 less its root volume)")
	fs.IntVar(&b.rss.FileMiB, "rss-file-mib", 16, "file each volume's pod writes before its random I/O, in MiB")
	fs.IntVar(&b.rss.Seconds, "rss-seconds", 20, "seconds of 4 KiB random reads and writes (half each, QD1 per volume)")
	jsonOut := fs.String("json", "", "also write every sample as JSON to this file (- for stdout)")
	fs.BoolVar(&b.keep, "keep", false, "keep the logs (the directory is printed)")
	fs.IntVar(&b.verbosity, "v", 0, "the processes' log verbosity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b.rss.SyncEvery = b.io.SyncEvery
	b.io.Bytes = int64(*ioMiB) << 20
	b.fakecloud, b.driver = filepath.Join(*binDir, "fakecloud"), filepath.Join(*binDir, "driver")
	b.backends, b.fsTypes = splitList(*backends), splitList(*fsTypes)
	b.rss.Backends = splitList(*rssBackends)
	if err := b.check(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "diskforge-fusebench-")
	if err != nil {
		return err
	}
	b.dir = dir
	if b.keep {
		fmt.Fprintln(os.Stderr, "bench: logs in", dir)
	}
	defer func() {
		// Every testbed has cleaned up after itself; this is the last net, then the directory goes.
		if err := sweep(dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
		if !b.keep {
			_ = os.RemoveAll(dir)
		}
	}()

	results := map[string][]*runResult{}
	for r := range b.runs {
		for j := range b.backends {
			backend := b.backends[(j+r)%len(b.backends)]
			res, err := b.runOne(ctx, backend, r)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, backend, err)
			}
			fmt.Fprintf(os.Stderr, "bench: round %d %s: %s\n", r+1, backend, res.brief())
			results[backend] = append(results[backend], res)
		}
	}
	var mem []*rssResult
	if b.rss.Volumes > 0 {
		for _, backend := range b.rss.Backends {
			res, err := b.memory(ctx, backend)
			if err != nil {
				return fmt.Errorf("memory, %s: %w", backend, err)
			}
			fmt.Fprintf(os.Stderr, "bench: memory %s: VmHWM %.0f MiB\n", backend, res.HWMMiB)
			mem = append(mem, res)
		}
	}
	rows := compareRows(results, b.fsTypes, b.io, "loop", "fuse")
	printComparison(os.Stdout, b, rows, mem)
	if *jsonOut != "" {
		return writeJSON(*jsonOut, map[string]any{"runs": results, "memory": mem, "rows": rows})
	}
	return nil
}

func (b *fuseBench) check() error {
	if os.Geteuid() != 0 {
		return errors.New("the fuse benchmark needs root (loop devices, FUSE, mkfs, mount)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("the fuse backend needs /dev/fuse: %w", err)
	}
	for _, f := range []string{b.fakecloud, b.driver} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w (make build)", err)
		}
	}
	if b.runs < 1 || b.stages < 1 || b.sizeGiB < 1 || b.io.Bytes < seqBlock || b.io.Bytes > int64(b.sizeGiB)<<29 ||
		b.io.RandReads < 8 || b.io.RandWrites < 1 || b.io.SyncEvery < 1 || b.rss.PerInstance < 1 || b.rss.Seconds < 1 || b.rss.FileMiB < 1 {
		return errors.New("--runs, --stages, --size, --rand-*, --sync-every and --rss-* must be positive, and --io-mib at most half the volume")
	}
	return nil
}

func (b *fuseBench) testbed(ctx context.Context, name, backend string, instances, perInstance int) (*testbed, error) {
	dir := filepath.Join(b.dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	return startTestbed(ctx, dir, testbedOptions{fakecloud: b.fakecloud, driver: b.driver, backend: backend,
		instances: instances, perInstance: perInstance, verbosity: b.verbosity})
}

// runOne stages --stages blank volumes per filesystem, one at a time, and runs the pod's I/O on the first volume
// of --io-fs once it is published.
func (b *fuseBench) runOne(ctx context.Context, backend string, run int) (_ *runResult, err error) {
	tb, err := b.testbed(ctx, fmt.Sprintf("round%d-%s", run+1, backend), backend, 1, 26)
	if err != nil {
		return nil, err
	}
	defer tb.close()
	res := &runResult{Backend: backend, Run: run + 1, StageMS: map[string][]float64{}, IOFS: b.ioFS}
	for _, fsType := range b.fsTypes {
		var vols []*benchVolume
		for range b.stages {
			v, err := tb.create(ctx, 0, fsType, b.sizeGiB)
			if err != nil {
				return nil, err
			}
			if err := tb.attach(ctx, v); err != nil {
				return nil, err
			}
			vols = append(vols, v)
		}
		for _, v := range vols {
			// The writes of what ran before reach the disk now, not during the stage.
			unix.Sync()
			took, err := tb.stage(ctx, v)
			if err != nil {
				return nil, err
			}
			res.StageMS[fsType] = append(res.StageMS[fsType], ms(took))
		}
		if fsType == b.ioFS {
			target, err := tb.mount(ctx, vols[0])
			if err != nil {
				return nil, err
			}
			unix.Sync()
			if res.IO, err = b.io.run(ctx, target, func() (time.Duration, error) { return tb.cloud.cpu("fakecloud") }); err != nil {
				return nil, err
			}
		}
		if err := tb.releaseAll(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (r *runResult) brief() string {
	var parts []string
	for fs, v := range r.StageMS {
		parts = append(parts, fmt.Sprintf("stage %s %.0f ms", fs, median(v)))
	}
	for _, s := range r.IO {
		parts = append(parts, fmt.Sprintf("%s %.0f MiB/s %.0f IOPS", s.Workload, float64(s.Bytes)/(1<<20)/s.Seconds, float64(s.Ops)/s.Seconds))
	}
	return strings.Join(parts, ", ")
}

// memory attaches, stages and mounts --rss-volumes volumes over as many instances as they need, writes a file
// on each, then runs 4 KiB random reads and writes on all of them at once (one at a time per volume: 100
// volumes keep 100 requests in flight), reading fakecloud's VmRSS throughout.
func (b *fuseBench) memory(ctx context.Context, backend string) (*rssResult, error) {
	o := b.rss
	instances := (o.Volumes + o.PerInstance - 1) / o.PerInstance
	tb, err := b.testbed(ctx, "memory-"+backend, backend, instances, o.PerInstance)
	if err != nil {
		return nil, err
	}
	defer tb.close()
	res := &rssResult{Backend: backend, Volumes: o.Volumes, Instances: instances}
	if res.IdleMiB, _, err = procStatus(tb.pid); err != nil {
		return nil, err
	}
	start := time.Now()
	idx := make([]int, o.Volumes)
	for i := range idx {
		idx[i] = i
	}
	files := make([]string, o.Volumes)
	err = forEach(ctx, idx, 8, true, func(ctx context.Context, i int) error {
		v, err := tb.create(ctx, i%instances, "ext4", b.sizeGiB)
		if err != nil {
			return err
		}
		if err := tb.attach(ctx, v); err != nil {
			return err
		}
		if _, err := tb.stage(ctx, v); err != nil {
			return err
		}
		target, err := tb.mount(ctx, v)
		if err != nil {
			return err
		}
		files[i] = filepath.Join(target, "fusebench.dat")
		_, err = seqWrite(ctx, files[i], int64(o.FileMiB)<<20)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.SetupSeconds = time.Since(start).Seconds()
	if res.StagedMiB, _, err = procStatus(tb.pid); err != nil {
		return nil, err
	}
	cpu0, err := tb.cloud.cpu("fakecloud")
	if err != nil {
		return nil, err
	}
	var peak atomic.Uint64 // MiB × 1024
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, err := procStatus(tb.pid); err == nil && uint64(rss*1024) > peak.Load() {
				peak.Store(uint64(rss * 1024))
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	ioStart := time.Now()
	var ops atomic.Int64
	ioCtx, cancel := context.WithTimeout(ctx, time.Duration(o.Seconds)*time.Second)
	err = forEach(ioCtx, idx, len(idx), true, func(ctx context.Context, i int) error {
		n, err := mixedIO(ctx, files[i], int64(o.FileMiB)<<20, o.SyncEvery, uint64(i))
		ops.Add(n)
		return err
	})
	cancel()
	res.IOSeconds = time.Since(ioStart).Seconds()
	stopSampling()
	sampler.Wait()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	cpu1, err := tb.cloud.cpu("fakecloud")
	if err != nil {
		return nil, err
	}
	if _, res.HWMMiB, err = procStatus(tb.pid); err != nil {
		return nil, err
	}
	res.IOPeakMiB, res.Ops, res.FakecloudCPU = float64(peak.Load())/1024, ops.Load(), (cpu1 - cpu0).Seconds()
	return res, nil
}

// mixedIO runs 4 KiB O_DIRECT reads and writes, half each at random, on the file until ctx ends, with an
// fdatasync after every syncEvery writes, and returns the operations done. The end of ctx is the end of the
// run, not an error.
func mixedIO(ctx context.Context, file string, size int64, syncEvery int, seed uint64) (int64, error) {
	f, err := os.OpenFile(file, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	buf, free, err := aligned(randBlock)
	if err != nil {
		return 0, err
	}
	defer free()
	rng := rand.New(rand.NewPCG(seed, 25))
	var n int64
	writes := 0
	for ctx.Err() == nil {
		off := rng.Int64N(size/randBlock) * randBlock
		if rng.IntN(2) == 0 {
			_, err = f.ReadAt(buf, off)
		} else {
			fill(buf, uint64(n))
			if _, err = f.WriteAt(buf, off); err == nil {
				if writes++; writes%syncEvery == 0 {
					err = unix.Fdatasync(int(f.Fd()))
				}
			}
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func writeJSON(path string, v any) error {
	encode := func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	if path == "-" {
		return encode(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(encode(f), f.Close())
}
