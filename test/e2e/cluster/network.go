package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The cluster's network, on this host only: pods of every node on one Linux bridge (one subnet, a range of
// addresses per node), which also carries the two service addresses pods need, served by the harness itself:
// the API server listens on the kubernetes Service's ClusterIP, and a DNS server on the cluster DNS address
// (there is no kube-proxy: no iptables here). The harness creates the bridge with the pods' gateway address (this
// kernel has no dummy interfaces, and the CNI bridge plugin refuses a gateway bridge with other addresses): the
// plugin only adds the pods' veths to it, and host-local gives them the route through the gateway.
const (
	bridgeName   = "dfe2ebr0"
	bridgeMAC    = "02:df:e2:eb:00:01" // locally administered
	podSubnet    = "10.244.0.0/24"
	podGateway   = "10.244.0.1"
	serviceRange = "10.96.0.0/24"
	apiServiceIP = "10.96.0.1" // the first address of serviceRange: the kubernetes Service
	dnsServiceIP = "10.96.0.10"
	apiPort      = 443
)

// ip runs iproute2's ip.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// setupNetwork creates the bridge with the service addresses and the nodes' own addresses. A leftover of an earlier run that died is
// removed first: the name is the harness's own.
func (c *Cluster) setupNetwork() error {
	if linkExists(bridgeName) {
		c.logf("removing %s left by an earlier run", bridgeName)
		if err := ip("link", "del", bridgeName); err != nil {
			return err
		}
	}
	// A bridge without an address of its own takes the lowest of its ports' and changes it as pods come and go;
	// the pods' ARP entries for the gateway and the API server then name a MAC nobody answers to, and their
	// connections stall for tens of seconds (controller sidecars lose their leader leases).
	if err := ip("link", "add", bridgeName, "address", bridgeMAC, "type", "bridge"); err != nil {
		return err
	}
	c.undo = append(c.undo, removeBridge)
	addrs := []string{podGateway + "/24", apiServiceIP + "/32", dnsServiceIP + "/32"}
	for _, n := range slices.Concat(nodeSpecs, lateNodeSpecs) {
		addrs = append(addrs, n.Address+"/32")
	}
	for _, a := range addrs {
		if err := ip("addr", "add", a, "dev", bridgeName); err != nil {
			return err
		}
	}
	return ip("link", "set", bridgeName, "up")
}

// removeBridge deletes the bridge; the pods' veth ends went with their network namespaces.
func removeBridge() error {
	if !linkExists(bridgeName) {
		return nil
	}
	return ip("link", "del", bridgeName)
}

// writeCNIConfig writes the node's CNI network: the shared bridge, host-local addresses from the node's own range
// (index i of the nodes and the late nodes after them), no masquerading (there is no iptables, and pods talk only to
// this host).
func writeCNIConfig(dir, dataDir string, i int) error {
	per := 200 / (len(nodeSpecs) + len(lateNodeSpecs))
	start, end := 10+i*per, 10+(i+1)*per-1
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "diskforge-e2e",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridgeName, "isGateway": false, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": dataDir,
					"ranges": []any{[]any{map[string]any{"subnet": podSubnet, "gateway": podGateway,
						"rangeStart": fmt.Sprintf("10.244.0.%d", start), "rangeEnd": fmt.Sprintf("10.244.0.%d", end)}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	raw, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-diskforge-e2e.conflist"), raw, 0o644)
}
