package cluster

import "github.com/diskforge/diskforge/internal/hostclean"

// releaseHost unmounts every mount below dir and releases every loop device whose backing file lies below dir:
// what kubelets, node plugins and fakecloud of this run left, and nothing else.
func releaseHost(dir string, logf func(string, ...any)) {
	if dir == "" {
		return
	}
	if err := hostclean.Clean(dir); err != nil && logf != nil {
		logf("cleanup: %v", err)
	}
}
