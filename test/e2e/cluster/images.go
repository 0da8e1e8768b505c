package cluster

// Images built by make image (tools/images) for the e2e, besides the deployment's.
const (
	// TestImage is Debian's busybox, the scenarios' application image and the e2e suite's busybox.
	TestImage = "diskforge.local/e2e-test-images/busybox:1.37.0-1"
	// repoListYAML points Kubernetes' e2e suite (KUBE_TEST_REPO_LIST) at the images built here: busybox, agnhost
	// and pause under their upstream names and tags, in our registries, and (make e2e-conformance) the
	// sig-storage images its manifests name, hello-populator.
	repoListYAML = "promoterE2eRegistry: diskforge.local/e2e-test-images\ngcRegistry: diskforge.local\n" +
		"sigStorageRegistry: diskforge.local/sig-storage\n"
)

// imageAliases name images of Kubernetes' e2e suite that we do not build after one we do, for suites that need
// no more of them than the alias has. The volumes suite's exec spec runs nginx only for sh, ls and chmod:
// busybox has them. (glibc-dns-testing is built: multiVolume needs GNU dd.)
var imageAliases = map[string]string{
	"diskforge.local/e2e-test-images/nginx:1.15-4": TestImage,
}
