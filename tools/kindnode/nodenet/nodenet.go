// Package nodenet is the pod network of the offline kind node image, in the place of kind's kindnetd (which no
// module proxy serves): all nodes of a kind cluster share one L2 network, so each node bridges its own pods
// (the CNI bridge and host-local plugins on the pod CIDR the controller manager gave its Node) and reaches the
// other nodes' pods through a route per node: that node's pod CIDR via that node's address. No overlay, no
// masquerading: pods talk to pods, nodes and Services (kube-proxy) with their own addresses; only traffic
// leaving the cluster's network would need NAT, and the e2e sends none.
package nodenet

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
)

// Node is what nodenet needs of a Kubernetes Node.
type Node struct {
	Name    string
	PodCIDR string
	// Address is the node's InternalIP (its address on kind's network).
	Address string
}

// ParseNodeList reads a NodeList as the API server sends it (GET /api/v1/nodes).
func ParseNodeList(raw []byte) ([]Node, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				PodCIDR string `json:"podCIDR"`
			} `json:"spec"`
			Status struct {
				Addresses []struct {
					Type    string `json:"type"`
					Address string `json:"address"`
				} `json:"addresses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("node list: %w", err)
	}
	nodes := make([]Node, 0, len(list.Items))
	for _, item := range list.Items {
		n := Node{Name: item.Metadata.Name, PodCIDR: item.Spec.PodCIDR}
		for _, a := range item.Status.Addresses {
			if a.Type == "InternalIP" && n.Address == "" {
				if ip := net.ParseIP(a.Address); ip != nil && ip.To4() != nil {
					n.Address = a.Address
				}
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Route is a route to another node's pods.
type Route struct {
	Dst *net.IPNet
	Via net.IP
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Plan is what one node must have: its own pod CIDR (empty until the controller manager assigns it) and a route
// to each other node's pods, sorted by destination.
type Plan struct {
	PodCIDR string
	Routes  []Route
}

// PlanFor computes the plan of node self from every node. Nodes without a pod CIDR or an IPv4 address yet are
// left out until they have them; a malformed CIDR is an error (the API server validates it, so it means a bug).
func PlanFor(self string, nodes []Node) (Plan, error) {
	var p Plan
	for _, n := range nodes {
		if n.Name == self {
			if n.PodCIDR != "" {
				if _, _, err := net.ParseCIDR(n.PodCIDR); err != nil {
					return Plan{}, fmt.Errorf("node %s: pod CIDR: %w", n.Name, err)
				}
			}
			p.PodCIDR = n.PodCIDR
			continue
		}
		if n.PodCIDR == "" || n.Address == "" {
			continue
		}
		_, dst, err := net.ParseCIDR(n.PodCIDR)
		if err != nil {
			return Plan{}, fmt.Errorf("node %s: pod CIDR: %w", n.Name, err)
		}
		if dst.IP.To4() == nil {
			continue // IPv4 clusters only, as kind's default
		}
		p.Routes = append(p.Routes, Route{Dst: dst, Via: net.ParseIP(n.Address)})
	}
	sort.Slice(p.Routes, func(i, j int) bool { return p.Routes[i].Dst.String() < p.Routes[j].Dst.String() })
	return p, nil
}

// Conflist is the node's CNI configuration: a bridge that is the pods' gateway, addresses from the node's pod
// CIDR, no masquerading (see the package comment), and the pods' default route through the bridge.
func Conflist(podCIDR string) ([]byte, error) {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return nil, fmt.Errorf("pod CIDR: %w", err)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "nodenet",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "nodenet0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": podCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": "/run/cni-ipam-state",
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
