//go:build tools

// Package tools records the Kubernetes commands a kind node image needs beyond the ones tools/kube builds for
// the local cluster, so that "go mod tidy" keeps their dependencies: kubeadm (kind bootstraps every node with
// it), kubectl (kind applies the CNI manifest with it) and kube-proxy (the Services of the cluster).
// hack/build-kind-node-image.sh builds them. The pins are tools/kube's, so the binaries match its kubelet and
// control plane.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
