package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The I/O a pod does on its volume, run by this process on the published path (NodePublishVolume's target),
// through the filesystem the driver made, as a container's process would: no device is touched directly.

const (
	seqBlock  = 1 << 20
	randBlock = 4 << 10
)

// Workload names, in the order they run: each works on the file the first one writes.
const (
	wSeqWrite  = "seq-write"
	wSeqRead   = "seq-read"
	wRandRead1 = "rand-read-qd1"
	wRandRead8 = "rand-read-qd8"
	wRandWrite = "rand-write-qd1"
)

var podWorkloads = []string{wSeqWrite, wSeqRead, wRandRead1, wRandRead8, wRandWrite}

// podIO is the pod's workloads: Bytes is the file's size, RandReads and RandWrites the 4 KiB operations of the
// random workloads, SyncEvery the random writes between fdatasyncs.
type podIO struct {
	Bytes      int64
	RandReads  int
	RandWrites int
	SyncEvery  int
}

// ioSample is one workload's run: what moved, how long it took, and the CPU time fakecloud and the whole
// machine spent meanwhile.
type ioSample struct {
	Workload     string  `json:"workload"`
	Bytes        int64   `json:"bytes"`
	Ops          int64   `json:"ops"`
	Seconds      float64 `json:"seconds"`
	FakecloudCPU float64 `json:"fakecloudCpuSeconds"`
	MachineCPU   float64 `json:"machineCpuSeconds"`
}

func (s ioSample) gib() float64 { return float64(s.Bytes) / (1 << 30) }

// describe says what each workload does, for the table and the README.
func (p podIO) describe(w string) string {
	switch w {
	case wSeqWrite:
		return fmt.Sprintf("seq write %d MiB, 1 MiB buffered writes, fsync at the end", p.Bytes>>20)
	case wSeqRead:
		return "seq read, 1 MiB O_DIRECT"
	case wRandRead1:
		return "rand read 4 KiB O_DIRECT QD1"
	case wRandRead8:
		return "rand read 4 KiB O_DIRECT QD8"
	case wRandWrite:
		return fmt.Sprintf("rand write 4 KiB O_DIRECT QD1, fdatasync every %d", p.SyncEvery)
	}
	return w
}

// run runs every workload in dir in turn; cpu reads fakecloud's CPU time.
func (p podIO) run(ctx context.Context, dir string, cpu func() (time.Duration, error)) ([]ioSample, error) {
	file := filepath.Join(dir, "fusebench.dat")
	var out []ioSample
	for _, w := range podWorkloads {
		cpu0, err := cpu()
		if err != nil {
			return nil, err
		}
		busy0, err := machineBusy()
		if err != nil {
			return nil, err
		}
		start := time.Now()
		s, err := p.one(ctx, w, file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w, err)
		}
		s.Seconds = time.Since(start).Seconds()
		cpu1, err := cpu()
		if err != nil {
			return nil, err
		}
		busy1, err := machineBusy()
		if err != nil {
			return nil, err
		}
		s.Workload, s.FakecloudCPU, s.MachineCPU = w, (cpu1 - cpu0).Seconds(), busy1-busy0
		out = append(out, s)
	}
	return out, os.Remove(file)
}

func (p podIO) one(ctx context.Context, w, file string) (ioSample, error) {
	blocks := p.Bytes / randBlock
	switch w {
	case wSeqWrite:
		return seqWrite(ctx, file, p.Bytes)
	case wSeqRead:
		return seqRead(ctx, file, p.Bytes)
	case wRandRead1:
		return randIO(ctx, file, blocks, p.RandReads, 1, 0)
	case wRandRead8:
		return randIO(ctx, file, blocks, p.RandReads, 8, 0)
	case wRandWrite:
		return randIO(ctx, file, blocks, p.RandWrites, 1, p.SyncEvery)
	}
	return ioSample{}, fmt.Errorf("unknown workload %q", w)
}

// seqWrite writes the file in 1 MiB buffered writes and fsyncs it, as `dd bs=1M conv=fsync` does: the page
// cache takes the writes, the filesystem's writeback and the fsync move them to the device.
func seqWrite(ctx context.Context, file string, size int64) (ioSample, error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return ioSample{}, err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, seqBlock)
	fill(buf, 1)
	var s ioSample
	for off := int64(0); off < size; off += seqBlock {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		if _, err := f.Write(buf); err != nil {
			return s, err
		}
		s.Ops++
		s.Bytes += seqBlock
	}
	if err := f.Sync(); err != nil {
		return s, err
	}
	return s, f.Close()
}

// seqRead reads the file in 1 MiB O_DIRECT reads.
func seqRead(ctx context.Context, file string, size int64) (ioSample, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return ioSample{}, err
	}
	defer func() { _ = f.Close() }()
	buf, free, err := aligned(seqBlock)
	if err != nil {
		return ioSample{}, err
	}
	defer free()
	var s ioSample
	for off := int64(0); off < size; off += seqBlock {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		n, err := f.ReadAt(buf, off)
		if err != nil {
			return s, err
		}
		s.Ops++
		s.Bytes += int64(n)
	}
	return s, nil
}

// randIO runs ops 4 KiB O_DIRECT operations at random aligned offsets of the file's blocks, split over qd
// goroutines with a descriptor each (queue depth qd). syncEvery 0 reads; otherwise it writes, and each
// goroutine calls fdatasync after every syncEvery writes and at its end.
func randIO(ctx context.Context, file string, blocks int64, ops, qd, syncEvery int) (ioSample, error) {
	flags := os.O_RDONLY
	if syncEvery > 0 {
		flags = os.O_WRONLY
	}
	per := ops / qd
	errs := make([]error, qd)
	var wg sync.WaitGroup
	for w := range qd {
		wg.Go(func() {
			errs[w] = func() error {
				f, err := os.OpenFile(file, flags|unix.O_DIRECT, 0)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				buf, free, err := aligned(randBlock)
				if err != nil {
					return err
				}
				defer free()
				rng := rand.New(rand.NewPCG(uint64(w), 25))
				for i := range per {
					if i%256 == 0 && ctx.Err() != nil {
						return ctx.Err()
					}
					off := rng.Int64N(blocks) * randBlock
					if syncEvery == 0 {
						_, err = f.ReadAt(buf, off)
					} else {
						fill(buf, uint64(i))
						_, err = f.WriteAt(buf, off)
						if err == nil && (i+1)%syncEvery == 0 {
							err = unix.Fdatasync(int(f.Fd()))
						}
					}
					if err != nil {
						return err
					}
				}
				if syncEvery > 0 {
					return unix.Fdatasync(int(f.Fd()))
				}
				return nil
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return ioSample{}, err
	}
	n := int64(per * qd)
	return ioSample{Ops: n, Bytes: n * randBlock}, nil
}

// fill writes bytes that are neither zero nor repeated, so no layer can take a shortcut for them.
func fill(buf []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := rng.Uint64() | 1
		for k := range 8 {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
}

// aligned is a page-aligned buffer for O_DIRECT, and the function that frees it.
func aligned(n int) ([]byte, func(), error) {
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return buf, func() { _ = unix.Munmap(buf) }, nil
}

// machineBusy is the CPU time all CPUs spent on anything but idling or waiting for I/O (/proc/stat), in
// seconds: with the loop backend the kernel's loop workers do the work fakecloud does with the fuse backend.
func machineBusy() (float64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy float64
	// user nice system idle iowait irq softirq steal (guest time is already in user).
	for i, field := range fields[1:9] {
		v, err := strconv.ParseFloat(field, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy / 100, nil // USER_HZ
}

// procStatus reads VmRSS and VmHWM (the peak RSS) of a process, in MiB.
func procStatus(pid int) (rss, hwm float64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %q", pid, key, val)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
		}
		if key == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
	}
	if hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return rss, hwm, nil
}
