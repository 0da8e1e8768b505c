package nodenet

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

const nodeList = `{"kind":"NodeList","items":[
 {"metadata":{"name":"diskforge-control-plane"},"spec":{"podCIDR":"10.244.0.0/24"},
  "status":{"addresses":[{"type":"InternalIP","address":"10.89.0.2"},{"type":"Hostname","address":"diskforge-control-plane"}]}},
 {"metadata":{"name":"diskforge-worker"},"spec":{"podCIDR":"10.244.1.0/24"},
  "status":{"addresses":[{"type":"InternalIP","address":"fc00::3"},{"type":"InternalIP","address":"10.89.0.3"}]}},
 {"metadata":{"name":"diskforge-worker2"},"spec":{},
  "status":{"addresses":[{"type":"InternalIP","address":"10.89.0.4"}]}},
 {"metadata":{"name":"diskforge-worker3"},"spec":{"podCIDR":"10.244.3.0/24"},"status":{}}
]}`

func TestParseNodeList(t *testing.T) {
	nodes, err := ParseNodeList([]byte(nodeList))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(nodes)
	want := "[{diskforge-control-plane 10.244.0.0/24 10.89.0.2} {diskforge-worker 10.244.1.0/24 10.89.0.3} " +
		"{diskforge-worker2  10.89.0.4} {diskforge-worker3 10.244.3.0/24 }]"
	if got != want {
		t.Errorf("nodes %s\nwant  %s", got, want)
	}
	if _, err := ParseNodeList([]byte("<html>")); err == nil {
		t.Error("a body that is not a NodeList was accepted")
	}
}

// TestPlanFor: a node routes every other node's pod CIDR through that node's address, not its own; nodes
// without a pod CIDR or an IPv4 address wait.
func TestPlanFor(t *testing.T) {
	nodes, err := ParseNodeList([]byte(nodeList))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		self, cidr string
		routes     []string
	}{
		{"diskforge-control-plane", "10.244.0.0/24", []string{"10.244.1.0/24 via 10.89.0.3"}},
		{"diskforge-worker", "10.244.1.0/24", []string{"10.244.0.0/24 via 10.89.0.2"}},
		{"diskforge-worker2", "", []string{"10.244.0.0/24 via 10.89.0.2", "10.244.1.0/24 via 10.89.0.3"}},
		{"not-a-node", "", []string{"10.244.0.0/24 via 10.89.0.2", "10.244.1.0/24 via 10.89.0.3"}},
	}
	for _, c := range cases {
		p, err := PlanFor(c.self, nodes)
		if err != nil {
			t.Fatalf("%s: %v", c.self, err)
		}
		var routes []string
		for _, r := range p.Routes {
			routes = append(routes, r.String())
		}
		if p.PodCIDR != c.cidr || strings.Join(routes, ",") != strings.Join(c.routes, ",") {
			t.Errorf("%s: pod CIDR %q routes %v; want %q %v", c.self, p.PodCIDR, routes, c.cidr, c.routes)
		}
	}
	if _, err := PlanFor("a", []Node{{Name: "b", PodCIDR: "10.244.300.0/24", Address: "10.89.0.2"}}); err == nil {
		t.Error("a malformed pod CIDR was accepted")
	}
}

// TestConflist: the bridge with host-local on the node's pod CIDR, pods' default route, no masquerading.
func TestConflist(t *testing.T) {
	raw, err := Conflist("10.244.1.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type      string `json:"type"`
			IsGateway bool   `json:"isGateway"`
			IPMasq    bool   `json:"ipMasq"`
			IPAM      struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
				Routes []map[string]string   `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 1 {
		t.Fatalf("plugins: %s", raw)
	}
	p := conf.Plugins[0]
	if p.Type != "bridge" || !p.IsGateway || p.IPMasq || p.IPAM.Type != "host-local" ||
		p.IPAM.Ranges[0][0]["subnet"] != "10.244.1.0/24" || p.IPAM.Routes[0]["dst"] != "0.0.0.0/0" {
		t.Errorf("conflist:\n%s", raw)
	}
	if _, err := Conflist("not a cidr"); err == nil {
		t.Error("a malformed pod CIDR was accepted")
	}
}
