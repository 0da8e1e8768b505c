// Command coredns is CoreDNS v1.14.2 with the plugins of kubeadm's Corefile only (errors, health, ready,
// kubernetes, prometheus, forward, cache, loop, reload, loadbalance) and log: the DNS of the kind node image,
// named registry.k8s.io/coredns/coredns:v1.14.2 as kubeadm v1.36.3 deploys it. CoreDNS's own main imports
// every plugin, and with them the AWS, Azure and Google Cloud SDKs that a cluster's DNS never calls; a plugin
// the Corefile names but this build lacks fails CoreDNS at start with "unknown directive".
package main

import (
	"github.com/coredns/coredns/coremain"

	// Each import registers its plugin (CoreDNS's core/plugin/zplugin.go, cut down).
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
