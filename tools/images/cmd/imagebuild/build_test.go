package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBuildIsReproducible builds the same image twice, a minute's mtimes apart: same digest, same bytes.
func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	raw, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec{ref: "diskforge.local/test:1", entrypoint: []string{"/prog"}, files: []hostFile{{bin, "/prog"}}}
	var digests []string
	var tarballs [][]byte
	for i := range 2 {
		file := filepath.Join(dir, "out"+string(rune('a'+i))+".tar")
		d, err := build(spec, file)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		digests, tarballs = append(digests, d), append(tarballs, b)
		if err := os.Chtimes(bin, epoch.AddDate(0, 0, 1+i), epoch.AddDate(0, 0, 1+i)); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] != digests[1] || string(tarballs[0]) != string(tarballs[1]) {
		t.Fatalf("two builds differ: %s vs %s", digests[0], digests[1])
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"diskforge/driver:dev":            "docker.io/diskforge/driver:dev",
		"busybox:1":                       "docker.io/library/busybox:1",
		"registry.k8s.io/pause:3.10.2":    "registry.k8s.io/pause:3.10.2",
		"localhost/x:1":                   "localhost/x:1",
		"diskforge.local/e2e/busybox:1.0": "diskforge.local/e2e/busybox:1.0",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPopulatorImageOnlyWithItsBinary: hello-populator is built by make e2e-conformance alone, so its image is
// in the set exactly when its binary is, under the registry the e2e repo list names for sig-storage images.
func TestPopulatorImageOnlyWithItsBinary(t *testing.T) {
	component := filepath.Join("..", "..", "..", "..", "deploy", "kustomize", "components", "images", "kustomization.yaml")
	const ref = SigStorageRegistry + "/hello-populator:v1.0.1"
	for _, built := range []bool{false, true} {
		e2eBin := t.TempDir()
		if built {
			if err := os.WriteFile(filepath.Join(e2eBin, "hello-populator"), []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		specs, err := imageSpecs(options{bin: t.TempDir(), e2eBin: e2eBin, component: component})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range specs {
			if s.ref == ref {
				found = true
				if len(s.files) != 1 || s.files[0].src != filepath.Join(e2eBin, "hello-populator") {
					t.Errorf("%s holds %v, want the built hello-populator", ref, s.files)
				}
			}
		}
		if found != built {
			t.Errorf("binary built: %v; image %s in the set: %v", built, ref, found)
		}
	}
}

// TestRemoveTarballsBut: a build of the whole set leaves only its own tarballs, which is what the e2e nodes
// import; other files stay.
func TestRemoveTarballsBut(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kept.tar", "stale.tar", "images.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeTarballsBut(dir, []string{"kept.tar"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"images.txt", "kept.tar"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
