package nodelife

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// instance is the instance metadata service's view of the volumes attached: it can change, and fail.
type instance struct {
	mu      sync.Mutex
	devices []string
	err     error
}

func (i *instance) set(err error, devices ...string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.devices, i.err = devices, err
}

func (i *instance) attached(context.Context) ([]string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.devices, i.err
}

const typeLimit = 26

func newTestLimits(t *testing.T, client *fake.Clientset, in *instance) *Limits {
	return NewLimits(LimitOptions{TypeLimit: typeLimit, Initial: typeLimit, Attached: in.attached,
		Attachments: startAttachments(t, client), DeviceKey: "devicePath", MetadataRetry: 1})
}

// settle calls MaxVolumes until it answers want: the first reads of instance metadata run in the background.
func settle(t *testing.T, l *Limits, want int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("the attach limit to become %d", want), func() bool {
		return l.MaxVolumes(context.Background()) == want
	})
}

// TestLimitsCountForeignVolumes: volumes attached to the instance outside the driver take slots; the driver's
// own attached volumes (by their published device) and its attachments still attaching do not; another node's
// attachments never count.
func TestLimitsCountForeignVolumes(t *testing.T) {
	client := fake.NewClientset(
		attachment(testDriver, testNode, "pv-a", true, "/dev/xvdba"),
		attachment(testDriver, testNode, "pv-b", true, "/dev/xvdbb"),
		attachment(testDriver, testNode, "pv-c", false, ""),
		attachment(testDriver, "node-2", "pv-d", true, "/dev/xvdbc"),
	)
	in := &instance{}
	in.set(nil, "xvdba", "xvdbb")
	l := newTestLimits(t, client, in)
	settle(t, l, typeLimit)

	// Three volumes attached with the AWS CLI.
	in.set(nil, "xvdba", "xvdbb", "sdf", "sdg", "sdh")
	settle(t, l, typeLimit-3)

	// The driver's pv-c attaches under xvdbc: its slot is the driver's, not a foreign one.
	va := attachment(testDriver, testNode, "pv-c", true, "/dev/xvdbc")
	if _, err := client.StorageV1().VolumeAttachments().Update(context.Background(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	in.set(nil, "xvdba", "xvdbb", "sdf", "sdg", "sdh", "xvdbc")
	settle(t, l, typeLimit-3)

	// Two of the foreign volumes detached.
	in.set(nil, "xvdba", "xvdbb", "sdf", "xvdbc")
	settle(t, l, typeLimit-1)
}

// TestLimitsKeepLastGood: instance metadata failing leaves the last good limit, and its return moves it again.
func TestLimitsKeepLastGood(t *testing.T) {
	client := fake.NewClientset()
	in := &instance{}
	in.set(nil, "sdf", "sdg")
	l := newTestLimits(t, client, in)
	settle(t, l, typeLimit-2)

	in.set(errors.New("connection refused"), "sdf")
	for range 5 {
		if got := l.MaxVolumes(context.Background()); got != typeLimit-2 {
			t.Fatalf("MaxVolumes with instance metadata down = %d, want the last good %d", got, typeLimit-2)
		}
	}
	in.set(nil, "sdf")
	settle(t, l, typeLimit-1)
}

// TestLimitsBeforeAnything: until instance metadata and the attachments have been read, the limit is Initial;
// without instance metadata it stays there.
func TestLimitsBeforeAnything(t *testing.T) {
	a := NewAttachments(fake.NewClientset(), testDriver, testNode) // never run: never synced
	l := NewLimits(LimitOptions{TypeLimit: typeLimit, Initial: 20, Attachments: a, DeviceKey: "devicePath",
		Attached: (&instance{devices: []string{"sdf"}}).attached})
	if got := l.MaxVolumes(context.Background()); got != 20 {
		t.Errorf("MaxVolumes before the attachments are known = %d, want the initial 20", got)
	}
	l = NewLimits(LimitOptions{TypeLimit: typeLimit, Initial: 20, Attachments: startAttachments(t, fake.NewClientset()), DeviceKey: "devicePath"})
	if got := l.MaxVolumes(context.Background()); got != 20 {
		t.Errorf("MaxVolumes without instance metadata = %d, want the initial 20", got)
	}
}

// TestLimitsCountInterfaces: on a shared limit the network interfaces instance metadata lists take slots, read
// again as they change; --reserved-volume-attachments replaces counting the volumes, not the interfaces.
func TestLimitsCountInterfaces(t *testing.T) {
	var mu sync.Mutex
	interfaces := 1
	setInterfaces := func(n int) { mu.Lock(); interfaces = n; mu.Unlock() }
	read := func(context.Context) (int, error) { mu.Lock(); defer mu.Unlock(); return interfaces, nil }
	// A shared limit of 27 slots with the primary interface: 26 data volumes, one fewer per extra interface.
	with := func(n int) int64 { return int64(26 - max(n-1, 0)) }
	cases := []struct {
		name     string
		reserved int
		devices  []string
		want1    int64 // with the primary interface alone
		want3    int64 // with three interfaces
	}{
		{"counted from metadata", 0, []string{"sdf"}, 25, 23},
		{"reserved", 3, []string{"sdf"}, 24, 22},
		{"reserved for the root volume alone", 1, []string{"sdf", "sdg"}, 26, 24},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setInterfaces(1)
			in := &instance{}
			in.set(nil, tc.devices...)
			l := NewLimits(LimitOptions{TypeLimit: 26, Initial: 26, Attached: in.attached, Interfaces: read,
				TypeLimitWith: with, Reserved: tc.reserved, Attachments: startAttachments(t, fake.NewClientset()),
				DeviceKey: "devicePath", MetadataRetry: 1})
			settle(t, l, tc.want1)
			setInterfaces(3)
			settle(t, l, tc.want3)
		})
	}
}
