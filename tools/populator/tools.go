//go:build tools

// Package tools records hello-populator, the volume populator example the storage suite's "any volume data
// source" spec deploys, so that "go mod tidy" keeps its dependencies. hack/build-e2e-tools.sh populator builds it
// into .cache/e2e-bin/ (make e2e-conformance does; make e2e has no spec that uses it).
package tools

import _ "github.com/kubernetes-csi/lib-volume-populator/example/hello-populator"
