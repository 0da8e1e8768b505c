// Package cluster runs a real Kubernetes cluster as local processes for the e2e scenarios: etcd, the API
// server, the controller manager and the scheduler; three nodes, each a real kubelet on a fake container
// runtime with its own node plugin of the driver and a registrar; fakecloud on loop devices knowing the nodes
// as instances; the driver's controller and the CSI sidecars, run with the RBAC, service accounts and flags
// that deploy/kustomize ships.
package cluster

// NodeInfo is one node of the cluster.
type NodeInfo struct {
	Name       string
	Zone       string
	InstanceID string
	// RootDir is the kubelet's root directory (pods' volumes are mounted below it).
	RootDir string
}

// Info is what the scenarios need to know of a running local cluster.
type Info struct {
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string
	// CloudURL is fakecloud's base URL (EC2 API at /, admin endpoints at /admin).
	CloudURL string
	// CloudVolumesDir holds fakecloud's volume files; loop devices backed by files here belong to the run.
	CloudVolumesDir string
	// WorkDir holds everything the run made; mounts below it belong to the run.
	WorkDir string
	Nodes   []NodeInfo
}
