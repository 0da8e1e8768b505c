//go:build tools

// Package tools records the CNI plugins the e2e pods' network needs (bridge, host-local, loopback) so that
// "go mod tidy" keeps their dependencies. hack/build-e2e-tools.sh builds them into .cache/e2e-bin/cni/.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
