//go:build tools

// Package tools records the Helm command so that "go mod tidy" keeps its
// dependencies. hack/build-e2e-tools.sh builds it into .cache/e2e-bin/helm,
// which make manifests uses to lint and render charts/diskforge.
//
// Helm lives in its own module because helm.sh/helm/v3 requires its own
// k8s.io/* versions; in tools/kube or tools/sidecars minimal version selection
// would move the Kubernetes binaries onto them.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
