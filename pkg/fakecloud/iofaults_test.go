package fakecloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/iofaults"
)

// ioFaultsAdmin sends one request to /admin/io-faults and decodes the answer.
func ioFaultsAdmin(t *testing.T, env *fakecloudtest.Env, method, body string) (int, iofaults.StatusDocument, string) {
	t.Helper()
	req, err := http.NewRequest(method, env.URL+"/admin/io-faults", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc iofaults.StatusDocument
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s /admin/io-faults answered %s: %v", method, raw, err)
		}
	}
	return resp.StatusCode, doc, string(raw)
}

func putIOFaults(t *testing.T, env *fakecloudtest.Env, rules string) {
	t.Helper()
	if code, _, raw := ioFaultsAdmin(t, env, http.MethodPut, `{"rules":[`+rules+`]}`); code != http.StatusOK {
		t.Fatalf("PUT /admin/io-faults %s: %d %s", rules, code, raw)
	}
}

// deviceIO reads or writes n bytes at off of dev with O_DIRECT, so the device's page cache neither answers
// nor absorbs it: the loop device itself, and so fakecloud, serves it.
func deviceIO(dev string, off int64, n int, write bool) error {
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_WRONLY
	}
	f, err := os.OpenFile(dev, flags|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	const align = 4096
	raw := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(&raw[0]))%align)) % align
	buf := raw[skip : skip+n]
	if write {
		_, err = f.WriteAt(buf, off)
	} else {
		_, err = f.ReadAt(buf, off)
	}
	return err
}

// TestIOFaultsThroughLoopDevice: rules put through the admin API reach the real loop device of an attached
// volume on the fuse backend: EIO in a byte range only, a read-only volume whose reads pass, added latency
// counted per I/O, and a hang that DELETE releases.
func TestIOFaultsThroughLoopDevice(t *testing.T) {
	env := startLoopCloud(t, fakecloud.BackendFuse)
	// Runs first at cleanup: nothing stays held while devices are released.
	t.Cleanup(env.Server.IOFaults.Clear)
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	attached(t, c, vol, env.Instances[zoneA], "/dev/xvdba")
	dev := env.Server.Backend.DevicePath(vol)
	const mib = 1 << 20

	// EIO on reads of [1 MiB, 1 MiB + 4 KiB): only requests overlapping it fail.
	putIOFaults(t, env, fmt.Sprintf(`{"volume":%q,"ops":["read"],"offset":%d,"length":4096,"effect":"error"}`, vol, mib))
	for _, tc := range []struct {
		off  int64
		n    int
		fail bool
	}{
		{0, 4096, false},
		{mib - 4096, 4096, false},
		{mib, 4096, true},
		{mib - 4096, 8192, true},
		{mib + 4096, 4096, false},
	} {
		err := deviceIO(dev, tc.off, tc.n, false)
		if tc.fail != (err != nil) || (err != nil && !errors.Is(err, syscall.EIO)) {
			t.Errorf("read %d+%d: %v; want failure %v with EIO", tc.off, tc.n, err, tc.fail)
		}
	}
	if err := deviceIO(dev, mib, 4096, true); err != nil {
		t.Errorf("write in the read-fault range: %v", err)
	}
	_, doc, _ := ioFaultsAdmin(t, env, http.MethodGet, "")
	if len(doc.Rules) != 1 || doc.Rules[0].Faulted < 2 {
		t.Errorf("GET after two faulted reads: %+v", doc.Rules)
	}

	// Read-only: writes fail (the loop device turns EROFS into EIO), reads pass.
	putIOFaults(t, env, fmt.Sprintf(`{"volume":%q,"effect":"readonly"}`, vol))
	err := deviceIO(dev, 0, 4096, true)
	if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to a read-only volume: %v; want EIO or EROFS", err)
	}
	t.Logf("a write to a read-only volume fails at the device with: %v", err)
	if err := deviceIO(dev, 0, 4096, false); err != nil {
		t.Errorf("read of a read-only volume: %v", err)
	}

	// Latency on reads: counted once per I/O the device sends.
	putIOFaults(t, env, `{"volume":"*","ops":["read"],"effect":"latency","latency":"1ms"}`)
	for range 10 {
		if err := deviceIO(dev, 0, 4096, false); err != nil {
			t.Fatalf("read with latency: %v", err)
		}
	}
	if _, doc, _ = ioFaultsAdmin(t, env, http.MethodGet, ""); doc.Rules[0].Faulted != 10 {
		t.Errorf("latency rule counted %d reads of 4 KiB, want 10", doc.Rules[0].Faulted)
	}

	// Hang: a read waits until DELETE releases it.
	putIOFaults(t, env, fmt.Sprintf(`{"volume":%q,"ops":["read"],"effect":"hang"}`, vol))
	done := make(chan error, 1)
	go func() { done <- deviceIO(dev, 8192, 4096, false) }()
	fakecloudtest.WaitFor(t, 10*time.Second, "a held read", func(context.Context) (bool, error) {
		_, doc, _ := ioFaultsAdmin(t, env, http.MethodGet, "")
		return len(doc.Rules) == 1 && doc.Rules[0].Held == 1, nil
	})
	select {
	case err := <-done:
		t.Fatalf("a read on a hung volume ended: %v", err)
	default:
	}
	if code, doc, raw := ioFaultsAdmin(t, env, http.MethodDelete, ""); code != http.StatusOK || len(doc.Rules) != 0 {
		t.Fatalf("DELETE: %d %s", code, raw)
	}
	if err := <-done; err != nil {
		t.Fatalf("released read: %v", err)
	}
}

// TestIOFaultsNeedFuse: without the fuse backend, rules are refused plainly rather than silently never
// applied; GET and an empty set still answer.
func TestIOFaultsNeedFuse(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	code, _, raw := ioFaultsAdmin(t, env, http.MethodPut, `{"rules":[{"volume":"*","effect":"error"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(raw, "I/O faults need --backend fuse") {
		t.Fatalf("PUT on the file backend: %d %s", code, raw)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if code, _, raw := ioFaultsAdmin(t, env, m, ""); code != http.StatusOK {
			t.Fatalf("%s on the file backend: %d %s", m, code, raw)
		}
	}
	dir := t.TempDir()
	_, err := fakecloud.New(fakecloud.Config{DataDir: dir, Backend: fakecloud.BackendFile, Cloud: fakecloud.DefaultCloud(),
		IOFaults: []iofaults.Rule{{Volume: "*", Effect: iofaults.EffectHang}}})
	if err == nil || !strings.Contains(err.Error(), "--backend fuse") {
		t.Fatalf("New with --fault-io on the file backend: %v", err)
	}
}
