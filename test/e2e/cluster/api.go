// Package cluster runs a real Kubernetes cluster on this host for the e2e: etcd, the API server, the controller
// manager and the scheduler as local processes; three nodes, each a real kubelet on its own containerd (Debian's
// runc, CNI bridge) in a mount namespace of its own; and the deploy/kustomize kind overlay applied as it is, so
// that the driver's controller with its sidecars, the node plugin with its registrar, the snapshot controller and
// fakecloud run as pods of the images make image builds.
//
// Each node has an address of its own and serves SSH there (ssh.go, nodecmd.go), as Kubernetes' e2e suite expects of
// a node: systemctl for its kubelet, and shell commands in its mount namespace. The node-control API (nodectl.go,
// signal.go) does to a node what happens to machines: kubelet stopped or started, a container signalled, the node
// lost and rebooted.
package cluster

// NodeInfo is one node of the cluster.
type NodeInfo struct {
	Name       string
	Zone       string
	InstanceID string
	// InstanceType is the node's node.kubernetes.io/instance-type label and its fakecloud instance's type: the
	// node plugin reads its volume limit from it, fakecloud enforces the same type's.
	InstanceType string
	// Address is the node's own address (its InternalIP): its kubelet serves there, and its SSH endpoint
	// listens on Address:22 (Info.SSH has the key).
	Address string
	// RootDir is the kubelet's root directory as the node sees it (pods' volumes are mounted below it).
	RootDir string
	// Pid is a process in the node's mount namespace (its containerd): /proc/<Pid>/mountinfo lists the node's
	// mounts and /proc/<Pid>/root/<path> reaches its files.
	Pid int
}

// CloudCredentials are the credentials of the overlay's fakecloud.
type CloudCredentials struct {
	AccessKeyID, SecretAccessKey, AdminToken string
}

// Info is what the scenarios need to know of a running local cluster.
type Info struct {
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string
	// CloudURL is fakecloud's base URL (EC2 API at /, admin endpoints at /admin): its pod's address.
	CloudURL string
	// Cloud holds the keys fakecloud checks (the kind overlay's aws-credentials Secret): EC2 requests are signed
	// with them, and /admin takes the admin token.
	Cloud CloudCredentials
	// CloudVolumesDir is fakecloud's volume files directory as its pod sees it; loop devices backed by files
	// there belong to the run.
	CloudVolumesDir string
	// WorkDir holds everything the run made.
	WorkDir string
	Nodes   []NodeInfo
	// TestImage is a busybox image every node has, for application pods.
	TestImage string
	// RepoList is a KUBE_TEST_REPO_LIST file naming the registries of the images built for Kubernetes' e2e suite.
	RepoList string
	// SSH is the key and user of the nodes' SSH endpoints (Kubernetes' e2e suite: SSH.Env()).
	SSH SSHInfo
}
