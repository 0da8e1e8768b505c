//go:build tools

// Package tools records containerd v2 (the daemon, ctr and the runc shim) so that "go mod tidy" keeps their
// dependencies. hack/build-e2e-tools.sh builds them into .cache/e2e-bin/. containerd runs the e2e kubelets'
// pods with Debian's runc.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
