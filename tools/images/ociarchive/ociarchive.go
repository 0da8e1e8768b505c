// Package ociarchive is what the repository's two image builders share: imagebuild (tools/images/cmd/imagebuild,
// the images of make image) and kindnode (tools/kindnode, the images baked into the kind node image). Both give
// an image the same config (linux/amd64, an entrypoint, PATH, working directory /, OCI media types) and write it
// as an OCI image-layout tarball that `ctr images import` names by its annotations. The archive is deterministic
// (entries sorted, parent directories first, owner root, mtime 0: the same image gives the same bytes) and written
// atomically (a temporary file renamed into place: no half-written file remains). It lives here, in one place, so
// the two builders cannot drift apart; kindnode requires this module through a replace directive.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Path is the PATH of every image's config.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Annotations containerd's import names an image by: the full reference, and its tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// epoch is every archive entry's mtime.
var epoch = time.Unix(0, 0).UTC()

// Layer is the OCI layer (gzipped on demand) of raw, an uncompressed tar stream.
func Layer(raw []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Configure returns img for linux/amd64 with entrypoint, PATH, working directory / and labels (none when nil), its
// manifest and config of OCI media types.
func Configure(img v1.Image, entrypoint []string, labels map[string]string) (v1.Image, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = []string{"PATH=" + Path}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = labels
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON), nil
}

// WriteFile writes img to file as an OCI image layout in a tarball, named ref (registry/repository:tag) for
// containerd's import; atomically, through file.tmp. The layout is staged in a temporary directory next to file.
func WriteFile(img v1.Image, ref, file string) error {
	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		AnnotationImageName: ref,
		AnnotationRefName:   ref[strings.LastIndex(ref, ":")+1:],
	}))
	if err != nil {
		return err
	}
	return writeFileAtomic(file, func(w io.Writer) error { return tarDir(w, dir) })
}

// tarDir writes the regular files below dir and their parent directories as a tar stream: sorted, parents
// first, owner root, mode 0755 or 0644, mtime 0.
func tarDir(w io.Writer, dir string) error {
	regular := map[string]bool{} // every entry by its slash-separated path: true for a regular file, false for a directory
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		regular[rel] = true
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			regular[d] = false
		}
		return err
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(regular)) {
		h := &tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Uname: "root",
			Gname: "root", Format: tar.FormatPAX}
		var body []byte
		if regular[name] {
			if body, err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
				return err
			}
			h.Name, h.Typeflag, h.Mode, h.Size = name, tar.TypeReg, 0o644, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeFileAtomic writes file through a temporary file renamed into place, so no half-written file remains.
func writeFileAtomic(file string, write func(io.Writer) error) error {
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}
