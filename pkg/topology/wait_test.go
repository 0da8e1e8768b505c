package topology

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWaitNodeLabels: the node plugin started before fakecloud (kube-nodes) labelled its Node waits for the
// labels, and a provider ID of another cloud (kind's) is not taken for the instance ID meanwhile.
func TestWaitNodeLabels(t *testing.T) {
	kind := corev1.NodeSpec{ProviderID: "kind://podman/kind/kind-control-plane"}
	labelled := map[string]string{InstanceIDLabel: "i-0123456789abcdef0", WellKnownZoneKey: "us-east-1b",
		InstanceTypeLabel: "m5.large"}
	for _, tc := range []struct {
		name       string
		labels     map[string]string
		spec       corev1.NodeSpec
		labelLater bool // fakecloud labels the Node while the plugin waits
		want       NodeIdentity
		wantErr    bool
	}{
		{name: "labelled while waiting", spec: kind, labelLater: true,
			want: NodeIdentity{InstanceID: "i-0123456789abcdef0", Zone: "us-east-1b", InstanceType: "m5.large"}},
		{name: "labelled already", labels: labelled, spec: kind,
			want: NodeIdentity{InstanceID: "i-0123456789abcdef0", Zone: "us-east-1b", InstanceType: "m5.large"}},
		{name: "an aws provider ID and a zone", labels: map[string]string{WellKnownZoneKey: "us-east-1a"},
			spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1"}, want: NodeIdentity{InstanceID: "i-1", Zone: "us-east-1a"}},
		{name: "a zone but kind's provider ID: never labelled", labels: map[string]string{WellKnownZoneKey: "us-east-1a"},
			spec: kind, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}, Spec: tc.spec}
			client := fake.NewSimpleClientset(node)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if tc.labelLater {
				go func() {
					time.Sleep(50 * time.Millisecond)
					n := node.DeepCopy()
					n.Labels = labelled
					if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
						t.Error(err)
					}
				}()
			}
			got, err := WaitNodeLabels(ctx, client, "n", 10*time.Millisecond)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("WaitNodeLabels = %+v, want an error once the wait ends", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WaitNodeLabels = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
