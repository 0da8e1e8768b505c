//go:build tools

// Package tools records the etcd server command so that "go mod tidy" keeps
// its dependencies. hack/build-e2e-tools.sh builds it into .cache/e2e-bin/etcd.
//
// etcd lives in its own module, not in tools/kube, because go.etcd.io/etcd/server/v3
// v3.6.16 requires newer grpc, otel and golang.org/x modules than k8s.io/kubernetes
// v1.36.3 pins; in one module, minimal version selection would rebuild the
// Kubernetes binaries against those newer dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
