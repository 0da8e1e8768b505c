package topology

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

func TestNodeLabelsInstanceType(t *testing.T) {
	client := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ga", Labels: map[string]string{WellKnownZoneKey: "us-east-1a",
			InstanceTypeLabel: "c5.large", BetaInstanceTypeLabel: "m5.large"}}, Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "beta", Labels: map[string]string{ZoneKey: "us-east-1b",
			BetaInstanceTypeLabel: "m5.xlarge", InstanceIDLabel: "i-2"}}},
	)
	for name, want := range map[string]NodeIdentity{
		"ga":   {InstanceID: "i-1", Zone: "us-east-1a", InstanceType: "c5.large"},
		"beta": {InstanceID: "i-2", Zone: "us-east-1b", InstanceType: "m5.xlarge"},
	} {
		got, err := NodeLabels(context.Background(), client, name)
		if err != nil || got != want {
			t.Errorf("NodeLabels(%s) = %+v, %v; want %+v", name, got, err, want)
		}
	}
}

// TestFromIMDS reads identities from fakecloud's instance metadata service through the SDK's client, and
// Resolve takes from it only what flags and the Node left unknown.
func TestFromIMDS(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "c5.xlarge"}}
	e := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	url := e.IMDS(t, fakecloudtest.InstanceA)
	ctx := context.Background()

	got, err := FromIMDS(ctx, url)
	want := NodeIdentity{InstanceID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "c5.xlarge"}
	if err != nil || got != want {
		t.Fatalf("FromIMDS = %+v, %v; want %+v", got, err, want)
	}
	fromIMDS := func(ctx context.Context) (NodeIdentity, error) { return FromIMDS(ctx, url) }
	got, err = Resolve(ctx, NodeIdentity{InstanceType: "m5.large"}, fromIMDS)
	if want := (NodeIdentity{InstanceID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "m5.large"}); err != nil || got != want {
		t.Errorf("Resolve with an explicit type = %+v, %v; want %+v", got, err, want)
	}
	if _, err := FromIMDS(ctx, e.IMDS(t, "i-0ffffffffffffffff")); err == nil {
		t.Error("FromIMDS of an instance fakecloud does not know succeeded")
	}
}

func TestVolumeLimit(t *testing.T) {
	def, _ := instancetypes.Lookup(instancetypes.Default)
	c5, _ := instancetypes.Lookup("c5.large")
	tests := []struct {
		id        NodeIdentity
		want      int64
		wantKnown bool
	}{
		{NodeIdentity{InstanceType: "c5.large"}, int64(c5.VolumeLimit()), true},
		{NodeIdentity{InstanceType: "c5.large", BootVolumes: 2}, int64(c5.VolumeLimit() - 2), true},
		{NodeIdentity{}, int64(def.VolumeLimit()), false},
		{NodeIdentity{InstanceType: "z9.huge"}, int64(def.VolumeLimit()), false},
		{NodeIdentity{InstanceType: "c5.large", BootVolumes: 100}, 1, true},
	}
	for _, tc := range tests {
		if got, known := tc.id.VolumeLimit(); got != tc.want || known != tc.wantKnown {
			t.Errorf("%+v: VolumeLimit = %d, %v; want %d, %v", tc.id, got, known, tc.want, tc.wantKnown)
		}
	}
}
