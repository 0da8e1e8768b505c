//go:build tools

// Package tools records the CSI sidecar commands this module builds, so that
// "go mod tidy" keeps their dependencies. hack/build-e2e-tools.sh builds them
// into .cache/e2e-bin/. They cannot be installed with "go install pkg@version"
// because their own go.mod files carry replace directives.
package tools

import (
	_ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
