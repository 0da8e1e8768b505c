package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSaveLogs(t *testing.T) {
	work, to := t.TempDir(), filepath.Join(t.TempDir(), "saved")
	files := map[string]bool{ // path in the work directory: saved
		"logs/etcd.log":            true,
		"logs/node-a1-kubelet.log": true,
		"nodes/node-a1/host/var_log_pods/ns_pod_uid/driver/0.log":      true,
		"nodes/node-a1/host/var_log_pods/ns_pod_uid/fakecloud/1.log":   true,
		"nodes/node-a1/host/var_lib_kubelet/pods/x/volumes/data/a.log": false, // a volume's content
		"nodes/node-a1/containerd/root/some.log":                       false,
		"nodes/node-a1/host/var_log_pods/ns_pod_uid/driver/0.log.gz":   false,
		"etcd/member/wal/0.log":                                        false,
		"pki/ca.crt":                                                   false,
	}
	for rel := range files {
		p := filepath.Join(work, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := saveLogs(t.TempDir(), to); n != 0 || err != nil {
		t.Fatalf("an empty work directory: %d saved, %v; want none and no error", n, err)
	}
	n, err := saveLogs(work, to)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for rel, saved := range files {
		if saved {
			want = append(want, rel)
		}
	}
	err = filepath.WalkDir(to, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(to, path)
		if b, err := os.ReadFile(path); err != nil || string(b) != rel {
			t.Errorf("%s holds %q (%v), want its original's content", rel, b, err)
		}
		got = append(got, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || n != len(want) {
		t.Fatalf("saved %d: %v, want %v", n, got, want)
	}
}
