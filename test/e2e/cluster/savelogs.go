package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// saveLogs copies the run's logs out of the work directory before Stop removes it: the control plane's,
// containerd's and the kubelets' (logs/), and every container's log (each node's /var/log/pods, which holds the
// driver, the sidecars and fakecloud). A slow or failed step can then be read afterwards; the logs are about
// 1.5 MB a run, the work directory gigabytes. It returns how many files it copied.
func saveLogs(workDir, to string) (int, error) {
	podLogs, err := filepath.Glob(filepath.Join(workDir, "nodes", "*", "host", "var_log_pods"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, root := range append([]string{filepath.Join(workDir, "logs")}, podLogs...) {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == root {
				return nil // a start that failed early made no logs/
			}
			if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".log") {
				return err
			}
			rel, err := filepath.Rel(workDir, path)
			if err != nil {
				return err
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(to, rel), raw, 0o644); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
