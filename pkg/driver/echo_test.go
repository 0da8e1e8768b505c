package driver

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// TestErrorsEchoBounded: a refused request's message names what was wrong without repeating a huge input in
// full, in the reply and in the log; the code is kept.
func TestErrorsEchoBounded(t *testing.T) {
	var logs syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&logs)
	t.Cleanup(func() { klog.SetOutput(nil); klog.LogToStderr(true) })

	ctrl, _ := newTestController(t)
	node, err := NewNodeServer(NodeOptions{InstanceID: "i-0abc", Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	conn := serveSocket(t, Services{Controller: ctrl, Node: node})
	cc, nc := csi.NewControllerClient(conn), csi.NewNodeClient(conn)

	huge := strings.Repeat("é", 1<<19) // 1 MiB, multi-byte runes
	cases := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"unknown parameter named by a huge key", func() error {
			_, err := cc.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-x",
				VolumeCapabilities: []*csi.VolumeCapability{mountRWO}, Parameters: map[string]string{huge: "x"}})
			return err
		}, codes.InvalidArgument},
		{"huge volume ID", func() error {
			_, err := cc.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{VolumeId: "vol-" + huge,
				NodeId: "i-0abc", VolumeCapability: mountRWO})
			return err
		}, codes.InvalidArgument},
		{"huge staging path", func() error {
			_, err := nc.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: "vol-0123456789abcdef0",
				StagingTargetPath: "/" + huge, VolumeCapability: mountRWO})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %s (%.200s), want %s", st.Code(), st.Message(), tc.code)
			}
			if len(st.Message()) > maxEcho || !utf8.ValidString(st.Message()) {
				t.Errorf("message is %d bytes (valid UTF-8: %v), want at most %d", len(st.Message()), utf8.ValidString(st.Message()), maxEcho)
			}
		})
	}
	klog.Flush()
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 4*maxEcho {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
}

func TestCut(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 100), 60, strings.Repeat("a", 24) + "… [76 bytes cut]"},
		{strings.Repeat("é", 50), 60, strings.Repeat("é", 12) + "… [76 bytes cut]"},
		{strings.Repeat("a", 60), 60, strings.Repeat("a", 60)},
	}
	for _, tc := range cases {
		if got := cut(tc.in, tc.max); got != tc.want || len(got) > tc.max {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
