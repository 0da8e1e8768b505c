package nodelife

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	testDriver = "disk.csi.diskforge.io"
	testNode   = "node-1"
)

func node(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func csiNode(name string, drivers ...string) *storagev1.CSINode {
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: "i-1"})
	}
	return n
}

// attachment is a VolumeAttachment of driver for volume pv on nodeName; device is its published device name.
func attachment(driver, nodeName, pv string, attached bool, device string) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-" + pv + "-" + nodeName},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: nodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached},
	}
	if device != "" {
		va.Status.AttachmentMetadata = map[string]string{"devicePath": device}
	}
	return va
}

// startAttachments runs an Attachments cache until the test ends and waits for it to fill.
func startAttachments(t *testing.T, client *fake.Clientset) *Attachments {
	t.Helper()
	a := NewAttachments(client, testDriver, testNode)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go a.Run(ctx)
	eventually(t, "the attachments cache to fill", func() bool { _, synced := a.List(); return synced })
	return a
}

// eventually polls cond until it holds; the bound is only there to end a broken test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// testCtx ends a test that would otherwise hang.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
