//go:build tools

// Package tools records the etcd server command at the version kubeadm v1.36.3 runs (its DefaultEtcdVersion,
// 3.6.8-0), so that "go mod tidy" keeps its dependencies; hack/build-kind-node-image.sh builds it into the kind
// node image's registry.k8s.io/etcd:3.6.8-0. The local cluster's etcd (tools/etcd) is newer and needs no
// kubeadm; one etcd for both would make the node image depend on kubeadm configuration patches instead.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
