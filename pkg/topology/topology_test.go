package topology

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func seg(key, zone string) *csi.Topology {
	return &csi.Topology{Segments: map[string]string{key: zone}}
}

func TestChooseZone(t *testing.T) {
	offered := []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	cases := []struct {
		name    string
		req     *csi.TopologyRequirement
		want    string
		wantErr error
	}{
		{"no requirements", nil, "us-east-1a", nil},
		{"preferred first", &csi.TopologyRequirement{Preferred: []*csi.Topology{seg(ZoneKey, "us-east-1c")}, Requisite: []*csi.Topology{seg(ZoneKey, "us-east-1b")}}, "us-east-1c", nil},
		{"requisite when no preferred", &csi.TopologyRequirement{Requisite: []*csi.Topology{seg(ZoneKey, "us-east-1b")}}, "us-east-1b", nil},
		{"well-known key", &csi.TopologyRequirement{Requisite: []*csi.Topology{seg(WellKnownZoneKey, "us-east-1b")}}, "us-east-1b", nil},
		{"skip unoffered preferred", &csi.TopologyRequirement{Preferred: []*csi.Topology{seg(ZoneKey, "eu-west-1a")}, Requisite: []*csi.Topology{seg(ZoneKey, "us-east-1b")}}, "us-east-1b", nil},
		{"only unoffered zones", &csi.TopologyRequirement{Requisite: []*csi.Topology{seg(ZoneKey, "eu-west-1a")}}, "", ErrNoZone},
		{"segments without zone", &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("kubernetes.io/hostname", "n1")}}, "us-east-1a", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseZone(tc.req, offered)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("ChooseZone = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	conflict := &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{ZoneKey: "us-east-1a", WellKnownZoneKey: "us-east-1b"}}}}
	if _, err := ChooseZone(conflict, offered); err == nil {
		t.Error("conflicting keys in one segment must fail")
	}
}

func TestResolveIdentity(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{WellKnownZoneKey: "us-east-1b"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1b/i-0123456789abcdef0"},
	})
	fromNode := func(ctx context.Context) (NodeIdentity, error) { return NodeLabels(ctx, client, "node-1") }
	missing := func(ctx context.Context) (NodeIdentity, error) { return NodeLabels(ctx, client, "node-404") }
	cases := []struct {
		name      string
		explicit  NodeIdentity
		fallbacks []func(context.Context) (NodeIdentity, error)
		want      NodeIdentity
		wantErr   bool
	}{
		{"explicit wins", NodeIdentity{InstanceID: "i-1", Zone: "z"}, nil, NodeIdentity{InstanceID: "i-1", Zone: "z"}, false},
		{"labels complete", NodeIdentity{InstanceID: "i-1"}, []func(context.Context) (NodeIdentity, error){fromNode}, NodeIdentity{InstanceID: "i-1", Zone: "us-east-1b"}, false},
		{"labels only", NodeIdentity{}, []func(context.Context) (NodeIdentity, error){missing, fromNode}, NodeIdentity{InstanceID: "i-0123456789abcdef0", Zone: "us-east-1b"}, false},
		{"nothing", NodeIdentity{}, []func(context.Context) (NodeIdentity, error){missing}, NodeIdentity{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(context.Background(), tc.explicit, tc.fallbacks...)
			if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
				t.Errorf("Resolve = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
