package cluster

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// saveLogs copies the run's logs out of the work directory before Stop removes it: the control plane's,
// containerd's and the kubelets' (logs/), and every container's log (each node's /var/log/pods, which holds the
// driver, the sidecars and fakecloud). A slow or failed step can then be read afterwards; the logs are about a
// megabyte a run, the work directory gigabytes.
func saveLogs(workDir, to string) (int, error) {
	n := 0
	err := filepath.WalkDir(workDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(workDir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Only logs/, nodes/ and each node's host/var_log_pods are walked: the rest holds volumes and images.
			parts := strings.Split(rel, string(filepath.Separator))
			switch {
			case rel == "." || parts[0] == "logs":
			case parts[0] == "nodes" && len(parts) <= 3 && (len(parts) < 3 || parts[2] == "host"):
			case parts[0] == "nodes" && len(parts) >= 4 && parts[2] == "host" && parts[3] == "var_log_pods":
			default:
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".log") {
			return nil
		}
		if err := copyLog(path, filepath.Join(to, rel)); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

func copyLog(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}
