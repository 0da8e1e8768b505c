package ociarchive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerTar is an uncompressed layer holding the one file name with body.
func layerTar(t *testing.T, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body)),
		ModTime: epoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// extract unpacks the archive into a new directory, checking that each entry is owned by root, has mtime 0, and
// comes after its parent directory and in sorted order.
func extract(t *testing.T, archive []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	var names []string
	seen := map[string]bool{}
	h, err := tr.Next()
	for ; err == nil; h, err = tr.Next() {
		name := strings.TrimSuffix(h.Name, "/")
		names = append(names, name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: owner %d:%d (%s:%s), mtime %v; want root, mtime 0", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if d := filepath.Dir(name); d != "." && !seen[d] {
			t.Errorf("%s comes before its directory %s", h.Name, d)
		}
		seen[name] = true
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if h.Mode != 0o755 {
				t.Errorf("%s: mode %o, want 755", h.Name, h.Mode)
			}
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if h.Mode != 0o644 {
				t.Errorf("%s: mode %o, want 644", h.Name, h.Mode)
			}
			raw, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: type %c, want only directories and regular files", h.Name, h.Typeflag)
		}
	}
	if err != io.EOF {
		t.Fatal(err)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("entries not sorted: %v", names)
	}
	for _, want := range []string{"blobs", "blobs/sha256", "index.json", "oci-layout"} {
		if !seen[want] {
			t.Errorf("no %s in the archive: %v", want, names)
		}
	}
	return dir
}

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ref        string
		entrypoint []string
		labels     map[string]string
		wantTag    string
	}{
		{name: "no labels", ref: "registry.k8s.io/etcd:3.6.8-0", entrypoint: []string{"/usr/local/bin/etcd"},
			wantTag: "3.6.8-0"},
		{name: "labels", ref: "diskforge.local/e2e-test-images/busybox:1.37.0-1", entrypoint: []string{"/bin/sh", "-c"},
			labels: map[string]string{"org.opencontainers.image.ref.name": "diskforge.local/e2e-test-images/busybox:1.37.0-1",
				"io.diskforge.debian-packages": "busybox-static=1:1.37.0-1"},
			wantTag: "1.37.0-1"},
		{name: "registry with a port", ref: "localhost:5000/diskforge/driver:dev", entrypoint: []string{"/driver"},
			wantTag: "dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := layerTar(t, "prog", "#!/bin/sh\n"+tc.name+"\n")
			layer, err := Layer(raw)
			if err != nil {
				t.Fatal(err)
			}
			img, err := mutate.AppendLayers(empty.Image, layer)
			if err != nil {
				t.Fatal(err)
			}
			if img, err = Configure(img, tc.entrypoint, tc.labels); err != nil {
				t.Fatal(err)
			}
			digest, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}

			// Two writes, to the same file and to another: the same bytes, nothing left behind.
			dir := t.TempDir()
			var archives [][]byte
			for _, name := range []string{"a.tar", "a.tar", "b.tar"} {
				file := filepath.Join(dir, name)
				if err := WriteFile(img, tc.ref, file); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				archives = append(archives, b)
			}
			for i := 1; i < len(archives); i++ {
				if !bytes.Equal(archives[0], archives[i]) {
					t.Fatalf("write %d differs from the first", i+1)
				}
			}
			for _, pattern := range []string{".layout-*", "*.tmp"} {
				if left, _ := filepath.Glob(filepath.Join(dir, pattern)); len(left) > 0 {
					t.Errorf("temporary files left: %v", left)
				}
			}

			// Read back: one image in the index, named for containerd's import, the one written.
			idx, err := layout.ImageIndexFromPath(extract(t, archives[0]))
			if err != nil {
				t.Fatal(err)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Manifests) != 1 {
				t.Fatalf("index holds %d manifests, want 1", len(m.Manifests))
			}
			d := m.Manifests[0]
			wantAnn := map[string]string{AnnotationImageName: tc.ref, AnnotationRefName: tc.wantTag}
			if !reflect.DeepEqual(d.Annotations, wantAnn) {
				t.Errorf("annotations %v, want %v", d.Annotations, wantAnn)
			}
			if d.Digest != digest || d.MediaType != types.OCIManifestSchema1 {
				t.Errorf("index names %s (%s), want %s (%s)", d.Digest, d.MediaType, digest, types.OCIManifestSchema1)
			}
			got, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, got, tc.entrypoint, tc.labels, raw)
		})
	}
}

// checkImage checks img's media types, config and its one layer's uncompressed bytes.
func checkImage(t *testing.T, img v1.Image, entrypoint []string, labels map[string]string, layerRaw []byte) {
	t.Helper()
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if man.MediaType != types.OCIManifestSchema1 || man.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("media types: manifest %s, config %s; want OCI", man.MediaType, man.Config.MediaType)
	}
	if len(man.Layers) != 1 || man.Layers[0].MediaType != types.OCILayer {
		t.Errorf("layers %+v, want one %s", man.Layers, types.OCILayer)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	c := cfg.Config
	if !reflect.DeepEqual(c.Entrypoint, entrypoint) || !reflect.DeepEqual(c.Env, []string{"PATH=" + Path}) ||
		c.WorkingDir != "/" || !reflect.DeepEqual(c.Labels, labels) {
		t.Errorf("config: entrypoint %q, env %q, working dir %q, labels %v; want %q, PATH, /, %v",
			c.Entrypoint, c.Env, c.WorkingDir, c.Labels, entrypoint, labels)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, layerRaw) {
		t.Error("the layer read back differs from the one written")
	}
}

// TestWriteFileAtomic: a failed write leaves the file as it was and no temporary file.
func TestWriteFileAtomic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		old     string // the file's content before, "" for none
		write   func(io.Writer) error
		want    string // the file's content after, "" for none
		wantErr bool
	}{
		{name: "new file", write: writeString("new"), want: "new"},
		{name: "replaces", old: "old", write: writeString("new"), want: "new"},
		{name: "failure keeps the old file", old: "old", write: failAfter("half"), want: "old", wantErr: true},
		{name: "failure makes no file", write: failAfter("half"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "out.tar")
			if tc.old != "" {
				if err := os.WriteFile(file, []byte(tc.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := writeFileAtomic(file, tc.write); (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want an error: %v", err, tc.wantErr)
			}
			b, err := os.ReadFile(file)
			if tc.want == "" {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("file exists (%q, %v), want none", b, err)
				}
			} else if string(b) != tc.want {
				t.Errorf("file holds %q (%v), want %q", b, err, tc.want)
			}
			if _, err := os.Stat(file + ".tmp"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary file left: %v", err)
			}
		})
	}
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func failAfter(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return errors.New("interrupted")
	}
}
