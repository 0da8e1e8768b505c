package driver

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// panickingFinder panics on every device lookup, as a bug in a handler would.
type panickingFinder struct{}

func (panickingFinder) Find(context.Context, string, map[string]string) (string, error) {
	panic("injected: device lookup exploded")
}
func (panickingFinder) Lookup(string) (string, error) { panic("injected: device lookup exploded") }
func (panickingFinder) Owns(string, uint64) (bool, error) {
	panic("injected: ownership check exploded")
}

// syncBuffer is a log sink safe for klog's writers and the test's reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRecoverPanic (10): a panic in a handler becomes Internal with the stack in the log; the server keeps
// serving, and the panicking call's in-flight hold is released (a retry is not Aborted).
func TestRecoverPanic(t *testing.T) {
	var logs syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&logs)
	t.Cleanup(func() { klog.SetOutput(nil); klog.LogToStderr(true) })

	node, err := NewNodeServer(NodeOptions{InstanceID: "i-0abc", Zone: "zone-a", Devices: panickingFinder{}})
	if err != nil {
		t.Fatal(err)
	}
	client := csi.NewNodeClient(serveSocket(t, Services{Node: node}))

	req := &csi.NodeStageVolumeRequest{VolumeId: testVolumeID, StagingTargetPath: filepath.Join(t.TempDir(), "staging"),
		VolumeCapability: mountCap("ext4", rwo)}
	for i := range 2 {
		_, err := client.NodeStageVolume(context.Background(), req)
		wantCode(t, err, codes.Internal, "stage with a panicking handler")
		if i == 0 && !strings.Contains(err.Error(), "device lookup exploded") {
			t.Errorf("error %v does not say what panicked", err)
		}
	}
	health, err := client.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: testVolumeID})
	wantCode(t, err, codes.Internal, "health with a panicking handler")
	_ = health
	if _, err := client.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{}); err != nil {
		t.Fatalf("the server stopped serving after a panic: %v", err)
	}
	klog.Flush()
	out := logs.String()
	for _, want := range []string{"RPC handler panicked", "/csi.v1.Node/NodeStageVolume", "panickingFinder.Find", "goroutine"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// serveSocket serves the services (and an identity) behind the driver's interceptors on a unix socket for the
// test's life, and returns a client connection to it that takes messages of up to 8 MiB.
func serveSocket(t *testing.T, s Services) *grpc.ClientConn {
	t.Helper()
	s.Identity = NewIdentityServer("disk.csi.diskforge.io", "test", false, nil)
	srv := NewGRPCServer(s, nil)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
