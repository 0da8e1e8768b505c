package cluster

// Images built by make image (tools/images) for the e2e, besides the deployment's.
const (
	// TestImage is Debian's busybox, the scenarios' application image and the e2e suite's busybox.
	TestImage = "diskforge.local/e2e-test-images/busybox:1.37.0-1"
	// repoListYAML points Kubernetes' e2e suite (KUBE_TEST_REPO_LIST) at the images built here: busybox, agnhost
	// and pause under their upstream names and tags, in our registries.
	repoListYAML = "promoterE2eRegistry: diskforge.local/e2e-test-images\ngcRegistry: diskforge.local\n"
)
