package blockdev

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
)

// The I/O benchmark runs each workload in a child process (this test binary again), so that this process's
// CPU time is the backend's own: for the fuse backend the FUSE server, for the loop backend next to nothing
// (the kernel's loop workers do its work). The machine's busy time counts both.

const (
	ioChildEnv   = "BLOCKDEV_IO_BENCH_CHILD" // workload:device
	ioBenchBytes = 256 << 20
	seqBlock     = 1 << 20
	randBlock    = 4 << 10
	randReads    = 20000
)

var ioWorkloads = []string{"seq-write", "seq-read", "rand-read-qd1", "rand-read-qd8"}

// ioResult is one workload's run.
type ioResult struct {
	Bytes   int64   `json:"bytes"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	// Filled in by the parent.
	ServerCPU  float64 `json:"-"` // this process, seconds
	ClientCPU  float64 `json:"-"` // the child, seconds
	MachineCPU float64 `json:"-"` // all CPUs busy, seconds
}

// TestIOBenchChild is not a test: BenchmarkBackendIO runs the test binary with it to drive one workload.
func TestIOBenchChild(t *testing.T) {
	spec := os.Getenv(ioChildEnv)
	if spec == "" {
		return
	}
	workload, dev, _ := strings.Cut(spec, ":")
	r, err := runWorkload(workload, dev)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", out)
}

func runWorkload(workload, dev string) (ioResult, error) {
	flags := unix.O_RDONLY
	if workload == "seq-write" {
		flags = unix.O_RDWR
	}
	open := func() (*os.File, error) { return os.OpenFile(dev, flags|unix.O_DIRECT, 0) }
	f, err := open()
	if err != nil {
		return ioResult{}, err
	}
	defer f.Close()
	var r ioResult
	start := time.Now()
	switch workload {
	case "seq-write", "seq-read":
		buf := testutil.AlignedBuf(seqBlock)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for off := int64(0); off < ioBenchBytes; off += seqBlock {
			if workload == "seq-write" {
				_, err = f.WriteAt(buf, off)
			} else {
				_, err = f.ReadAt(buf, off)
			}
			if err != nil {
				return r, err
			}
			r.Ops++
		}
		if workload == "seq-write" {
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return r, err
			}
		}
		r.Bytes = ioBenchBytes
	case "rand-read-qd1", "rand-read-qd8":
		workers := 1
		if workload == "rand-read-qd8" {
			workers = 8
		}
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() {
				g, err := open()
				if err != nil {
					errs[w] = err
					return
				}
				defer g.Close()
				buf := testutil.AlignedBuf(randBlock)
				rng := rand.New(rand.NewPCG(uint64(w), 25))
				for range randReads / workers {
					off := rng.Int64N(ioBenchBytes/randBlock) * randBlock
					if _, err := g.ReadAt(buf, off); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return r, err
			}
		}
		r.Ops = randReads / int64(workers) * int64(workers)
		r.Bytes = r.Ops * randBlock
	default:
		return r, fmt.Errorf("unknown workload %q", workload)
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// runIOChild runs one workload on dev in a child process and measures the CPU time around it.
func runIOChild(b *testing.B, workload, dev string) ioResult {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIOBenchChild$")
	cmd.Env = append(os.Environ(), ioChildEnv+"="+workload+":"+dev)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	selfBefore, busyBefore := selfCPU(b), machineBusy(b)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var r ioResult
	var found bool
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			found = json.Unmarshal([]byte(js), &r) == nil
		}
	}
	if err := cmd.Wait(); err != nil || !found {
		b.Fatalf("%s on %s: %v (result found: %v)", workload, dev, err, found)
	}
	r.ServerCPU = selfCPU(b) - selfBefore
	r.MachineCPU = machineBusy(b) - busyBefore
	r.ClientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return r
}

func selfCPU(b *testing.B) float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// machineBusy is the time all CPUs spent on anything but idling or waiting for I/O, from /proc/stat.
func machineBusy(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	var busy float64
	for i, field := range strings.Fields(line)[1:] {
		v, err := strconv.ParseFloat(field, 64)
		if err != nil {
			b.Fatalf("/proc/stat: %v", err)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice; guests are already in user.
		if i != 3 && i != 4 && i < 8 {
			busy += v
		}
	}
	return busy / 100 // USER_HZ
}

// BenchmarkBackendIO compares the loop backend with the fuse backend (and the fuse backend with buffered loop
// devices, the alternative to direct I/O) on the same workloads, in one run:
//
//	go test -run '^$' -bench BackendIO -benchtime 1x ./pkg/fakecloud/blockdev/
//
// Each workload works on a 256 MiB range of an attached volume with O_DIRECT on the device. It is a
// measurement, not a check: it reports MiB/s, IOPS and CPU seconds per GiB moved (this process = the
// server; the machine = everything, kernel workers included) and logs the fuse/loop ratios.
func BenchmarkBackendIO(b *testing.B) {
	requireFuse(b)
	backends := []struct {
		name string
		open func(b *testing.B, dir string) Backend
	}{
		{"loop", func(b *testing.B, dir string) Backend { l, _ := newLoopBackendT(b, dir); return l }},
		{"fuse", func(b *testing.B, dir string) Backend { return newFuseBackendT(b, dir, nil) }},
		{"fuse-buffered-loop", func(b *testing.B, dir string) Backend {
			fuseCleanup(b, dir)
			f, err := NewFuseBackend(context.Background(), dir, FuseOptions{bufferedLoop: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = f.Close() })
			return f
		}},
	}
	results := map[string]map[string]ioResult{}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			backend := be.open(b, b.TempDir())
			if err := backend.CreateVolume(ctx, "vol-bench", ioBenchBytes); err != nil {
				b.Fatal(err)
			}
			dev, err := backend.Attach(ctx, "vol-bench")
			if err != nil {
				b.Fatal(err)
			}
			results[be.name] = map[string]ioResult{}
			for _, w := range ioWorkloads {
				b.Run(w, func(b *testing.B) {
					var r ioResult
					for b.Loop() {
						r = runIOChild(b, w, dev)
					}
					gib := float64(r.Bytes) / (1 << 30)
					b.ReportMetric(float64(r.Bytes)/(1<<20)/r.Seconds, "MiB/s")
					b.ReportMetric(float64(r.Ops)/r.Seconds, "IOPS")
					b.ReportMetric(r.ServerCPU/gib, "server-cpu-s/GiB")
					b.ReportMetric(r.MachineCPU/gib, "machine-cpu-s/GiB")
					results[be.name][w] = r
				})
			}
			if err := backend.Detach(ctx, "vol-bench", false); err != nil {
				b.Fatal(err)
			}
		})
	}
	loop := results["loop"]
	for _, name := range []string{"fuse", "fuse-buffered-loop"} {
		for _, w := range ioWorkloads {
			l, f := loop[w], results[name][w]
			if l.Seconds == 0 || f.Seconds == 0 {
				continue
			}
			gib := float64(f.Bytes) / (1 << 30)
			b.Logf("%-18s %-14s time %.2fx of loop (%.0f vs %.0f MiB/s, %.0f vs %.0f IOPS); machine CPU %.2fx of loop (%.2f vs %.2f s/GiB); server CPU %.2f s/GiB (loop %.2f)",
				name, w, f.Seconds/l.Seconds, float64(f.Bytes)/(1<<20)/f.Seconds, float64(l.Bytes)/(1<<20)/l.Seconds,
				float64(f.Ops)/f.Seconds, float64(l.Ops)/l.Seconds,
				f.MachineCPU/max(l.MachineCPU, 0.01), f.MachineCPU/gib, l.MachineCPU/gib, f.ServerCPU/gib, l.ServerCPU/gib)
		}
	}
}
