//go:build tools

// Package tools records the commands this module builds, so that
// "go mod tidy" keeps their dependencies. hack/build-e2e-tools.sh builds
// them into .cache/e2e-bin/; nothing here is part of the diskforge module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
