// Package scenarios holds the Kubernetes end-to-end scenarios of the driver (issue #5). They run against any
// kubeconfig, or start the local cluster of test/e2e/cluster when none is given; the files are behind the build
// tag e2e:
//
//	cd test/e2e && sudo go test -tags e2e -v -timeout 40m ./scenarios/
//	cd test/e2e && go test -tags e2e -v ./scenarios/ -args -kubeconfig ~/.kube/config -cloud-url http://127.0.0.1:8787
package scenarios
