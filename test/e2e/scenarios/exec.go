//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// execIn runs cmd in the pod's app container (as kubectl exec does: API server, kubelet, containerd) and returns
// its standard output; stdin, if not nil, is its input.
func (r *run) execIn(ctx context.Context, pod string, stdin io.Reader, cmd ...string) (string, error) {
	req := r.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "app", Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(r.cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return stdout.String(), fmt.Errorf("exec %q in %s: %w: %s", cmd, pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (r *run) mustExec(t testing.TB, pod string, stdin io.Reader, cmd ...string) string {
	t.Helper()
	out, err := r.execIn(t.Context(), pod, stdin, cmd...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeData has the pod write a MiB of random data with a marker line into dir/e2e/data through its mount, and
// sync it so that a detach, a snapshot or a restore sees it.
func (r *run) writeData(t testing.TB, pod, dir, marker string) dataFile {
	t.Helper()
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	content := append([]byte(marker+"\n"), payload...)
	r.mustExec(t, pod, bytes.NewReader(content), "sh", "-c",
		fmt.Sprintf("mkdir -p %[1]s/e2e && cat > %[1]s/e2e/data && sync %[1]s/e2e/data && sync", dir))
	t.Logf("pod %s wrote %d bytes to %s/e2e/data", pod, len(content), dir)
	return dataFile{rel: "e2e/data", sum: sha256.Sum256(content), size: len(content)}
}

// verifyIn checks, from inside the pod, that dir holds the data file byte for byte.
func (d dataFile) verifyIn(t testing.TB, r *run, pod, dir string) {
	t.Helper()
	path := dir + "/" + d.rel
	out := r.mustExec(t, pod, nil, "sh", "-c", fmt.Sprintf("wc -c < %[1]s && sha256sum %[1]s", path))
	f := strings.Fields(out)
	want := hex.EncodeToString(d.sum[:])
	if len(f) < 2 || f[0] != strconv.Itoa(d.size) || f[1] != want {
		t.Fatalf("pod %s: %s is %q; want %d bytes, sha256 %s", pod, path, strings.TrimSpace(out), d.size, want)
	}
	t.Logf("pod %s reads the data written earlier at %s (%d bytes, sha256 %s…)", pod, path, d.size, want[:12])
}

// dfSize is the size in bytes of the filesystem at dir as df shows it inside the pod.
func (r *run) dfSize(ctx context.Context, pod, dir string) (int64, string, error) {
	out, err := r.execIn(ctx, pod, nil, "df", "-k", dir)
	if err != nil {
		return 0, "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 2 {
		return 0, out, fmt.Errorf("df output %q", out)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	return kb << 10, lines[len(lines)-1], err
}

// waitDFGrown waits until df inside the running pod shows the filesystem at dir above 90% of size.
func (r *run) waitDFGrown(t testing.TB, pod, dir string, size int64) {
	t.Helper()
	waitFor(t, "df in pod "+pod+" shows "+dir+" grown", func(ctx context.Context) (bool, string, error) {
		got, line, err := r.dfSize(ctx, pod, dir)
		if err != nil {
			return false, "", err
		}
		return got > size/10*9, line, nil
	})
}

// writeBlock has the pod write a MiB of random data at the start of its block device, bypassing the page cache.
func (r *run) writeBlock(t testing.TB, pod string) dataFile {
	t.Helper()
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	r.mustExec(t, pod, bytes.NewReader(payload), "sh", "-c",
		// Staged in a file first: dd reading the exec stream would write short blocks.
		fmt.Sprintf("cat > /tmp/block-data && dd if=/tmp/block-data of=%s bs=1048576 count=1 oflag=direct conv=fsync 2>/dev/null && rm /tmp/block-data", blockDevicePath))
	t.Logf("pod %s wrote %d bytes to %s", pod, len(payload), blockDevicePath)
	return dataFile{rel: blockDevicePath, sum: sha256.Sum256(payload), size: len(payload)}
}

// verifyBlock reads the block device's first MiB back, from inside the pod, bypassing the page cache.
func (d dataFile) verifyBlock(t testing.TB, r *run, pod string) {
	t.Helper()
	out := r.mustExec(t, pod, nil, "sh", "-c",
		fmt.Sprintf("dd if=%s bs=1048576 count=1 iflag=direct 2>/dev/null | sha256sum", blockDevicePath))
	want := hex.EncodeToString(d.sum[:])
	if f := strings.Fields(out); len(f) == 0 || f[0] != want {
		t.Fatalf("pod %s: %s reads back as %q, want sha256 %s", pod, blockDevicePath, strings.TrimSpace(out), want)
	}
	t.Logf("pod %s reads back what it wrote to %s (sha256 %s…)", pod, blockDevicePath, want[:12])
}
