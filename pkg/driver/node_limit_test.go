package driver

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// movingLimit is a node whose free slots change between calls, as volumes are attached outside Kubernetes.
type movingLimit struct{ v atomic.Int64 }

func (m *movingLimit) MaxVolumes(context.Context) int64 { return m.v.Load() }

// TestNodeGetInfoFollowsLimit: NodeGetInfo asks the limiter on each call, so kubelet's periodic calls see the
// limit move; without one it answers MaxVolumesPerNode.
func TestNodeGetInfoFollowsLimit(t *testing.T) {
	limit := &movingLimit{}
	limit.v.Store(25)
	n, err := NewNodeServer(NodeOptions{InstanceID: "i-0abc", Zone: "us-east-1a", MaxVolumesPerNode: 25,
		VolumeLimit: limit, Devices: failingFinder{t}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{25, 22, 1, 25} {
		limit.v.Store(want)
		info, err := n.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
		if err != nil || info.GetMaxVolumesPerNode() != want {
			t.Errorf("NodeGetInfo = %v, %v; want max_volumes_per_node %d", info, err, want)
		}
	}
}
