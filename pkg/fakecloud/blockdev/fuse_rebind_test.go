package blockdev

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
)

const rebindHelperEnv = "BLOCKDEV_FUSE_REBIND_HELPER_DIR"

// rebindVolumes are the volumes of TestFuseBackendRebindAfterKill, attached in this order at first so that
// their devices' numbers run against the order of their IDs.
var rebindVolumes = []string{"vol-d", "vol-c", "vol-b", "vol-a"}

const (
	rebindVolumeSize = 8 << 20
	rebindBlock      = 4096
	rebindRecord     = "attached.json"
)

// TestFuseRebindHelper is not a test: TestFuseBackendRebindAfterKill runs the test binary with it, as a
// fakecloud that keeps its record of attached volumes (volume -> device, as state's HostDevice) in a file,
// reconciles with it at start, attaches what is missing, records, and waits to be killed.
func TestFuseRebindHelper(t *testing.T) {
	b, dir, ok := helperBackend(t, rebindHelperEnv)
	if !ok {
		return
	}
	ctx := context.Background()
	record := map[string]string{}
	path := filepath.Join(dir, rebindRecord)
	if raw, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(raw, &record); err != nil {
			t.Fatal(err)
		}
		if err := b.Reconcile(ctx, record); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range rebindVolumes {
		if err := b.CreateVolume(ctx, id, rebindVolumeSize); err != nil {
			t.Fatal(err)
		}
		dev, err := b.Attach(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		record[id] = dev
	}
	raw, err := json.Marshal(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, true, func(f *os.File) error { _, err := f.Write(raw); return err }); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s\n", raw)
	select {}
}

// helperBackend opens the fuse backend of a *Helper test on the directory env names; ok is false when the
// test runs as a test, not as a helper.
func helperBackend(t *testing.T, env string) (b *FuseBackend, dir string, ok bool) {
	dir = os.Getenv(env)
	if dir == "" {
		return nil, "", false
	}
	b, err := NewFuseBackend(context.Background(), dir, FuseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b, dir, true
}

// crashHelper is a run of this test binary as a fakecloud (one of the *Helper tests) that prints
// "READY <what it serves>" once it serves, and then waits to be killed.
type crashHelper struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

// startCrashHelper runs the test named test with env=dir, and returns what it reports once it serves. The
// helper is killed at cleanup at the latest.
func startCrashHelper(t *testing.T, test, env, dir string) (*crashHelper, string) {
	t.Helper()
	h := &crashHelper{cmd: exec.Command(os.Args[0], "-test.run=^"+test+"$")}
	h.cmd.Env = append(os.Environ(), env+"="+dir)
	h.cmd.Stderr = &h.stderr
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.kill) // before fuseCleanup's release (cleanups run last first)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rec, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- rec
				break
			}
		}
		close(ready)
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained
	}()
	select {
	case rec, ok := <-ready:
		if !ok {
			h.kill()
			t.Fatalf("helper ended before serving; stderr:\n%s", h.stderr.String())
		}
		return h, rec
	case <-time.After(60 * time.Second):
		h.kill()
		t.Fatalf("helper did not serve in time; stderr:\n%s", h.stderr.String())
	}
	return nil, ""
}

// kill is kill -9; killing a dead helper again is a no-op.
func (h *crashHelper) kill() {
	if h.cmd.ProcessState == nil {
		_ = h.cmd.Process.Signal(syscall.SIGKILL)
		_ = h.cmd.Wait()
	}
}

// startRebindHelper starts TestFuseRebindHelper on dir and returns the devices it serves the volumes on.
func startRebindHelper(t *testing.T, dir string) (*crashHelper, map[string]string) {
	t.Helper()
	h, rec := startCrashHelper(t, "TestFuseRebindHelper", rebindHelperEnv, dir)
	devs := map[string]string{}
	if err := json.Unmarshal([]byte(rec), &devs); err != nil {
		t.Fatal(err)
	}
	return h, devs
}

// stampWriter writes blocks stamped with its volume's ID through the device path it was given, reopening the
// path after every error, as a raw block consumer that retries would.
func stampWriter(ctx context.Context, id, dev string, acked *atomic.Int64) {
	buf := testutil.AlignedBuf(rebindBlock)
	copy(buf, id+"|")
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for i := int64(0); ctx.Err() == nil; i++ {
		if f == nil {
			var err error
			if f, err = os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0); err != nil {
				f = nil
				time.Sleep(5 * time.Millisecond)
				continue
			}
		}
		off := (i % (rebindVolumeSize / rebindBlock)) * rebindBlock
		if _, err := f.WriteAt(buf, off); err != nil {
			f.Close()
			f = nil
			time.Sleep(time.Millisecond)
			continue
		}
		acked.Add(1)
	}
}

// foreignBlocks counts the blocks of the volume file that hold another volume's stamp.
func foreignBlocks(t *testing.T, file, id string) (own, foreign int) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, rebindBlock)
	for off := 0; off+rebindBlock <= len(raw); off += rebindBlock {
		blk := raw[off : off+rebindBlock]
		switch {
		case bytes.Equal(blk, zero):
		case bytes.HasPrefix(blk, []byte(id+"|")):
			own++
		default:
			foreign++
		}
	}
	return own, foreign
}

// TestFuseBackendRebindAfterKill: four attached volumes on the fuse backend, each written through the device
// it was attached as by a writer that reopens that path after errors, and three kill -9/restart cycles of the
// process serving them. Every volume must come back on its own loop device, so no writer ever writes into
// another volume.
func TestFuseBackendRebindAfterKill(t *testing.T) {
	requireFuse(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fuseCleanup(t, dir)

	h, first := startRebindHelper(t, dir)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	acked := make(map[string]*atomic.Int64, len(rebindVolumes))
	for _, id := range rebindVolumes {
		n, dev := &atomic.Int64{}, first[id]
		acked[id] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			stampWriter(ctx, id, dev, n)
		}()
	}
	stopWriters := sync.OnceFunc(func() { stop(); wg.Wait() })
	t.Cleanup(stopWriters) // writers hold the devices: stop them before the helper's devices are released

	var moved []string
	for cycle := 1; cycle <= 3; cycle++ {
		time.Sleep(500 * time.Millisecond)
		h.kill()
		time.Sleep(200 * time.Millisecond) // writers meet the dead server and reopen
		var devs map[string]string
		h, devs = startRebindHelper(t, dir)
		for _, id := range rebindVolumes {
			if devs[id] != first[id] {
				moved = append(moved, fmt.Sprintf("cycle %d: %s on %s, was %s", cycle, id, devs[id], first[id]))
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	stopWriters()
	h.kill()

	volumes := filepath.Join(dir, volumesDir)
	var wrong []string
	for _, id := range rebindVolumes {
		own, foreign := foreignBlocks(t, filepath.Join(volumes, id+imageSuffix), id)
		t.Logf("%s: %d writes acknowledged, %d blocks of its own, %d of another volume", id, acked[id].Load(), own, foreign)
		if own == 0 {
			t.Errorf("%s: no write of its own landed", id)
		}
		if foreign > 0 {
			wrong = append(wrong, fmt.Sprintf("%s holds %d blocks of another volume", id, foreign))
		}
	}
	if len(moved) > 0 {
		t.Errorf("volumes changed loop device: %v", moved)
	}
	if len(wrong) > 0 {
		t.Errorf("writes landed in the wrong volume: %v", wrong)
	}
}
