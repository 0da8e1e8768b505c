package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// caBundle is Debian's generated CA bundle (ca-certificates).
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// build makes the image of s and writes it as an OCI image-layout tarball to file; it returns the manifest digest.
func build(s imageSpec, file string) (string, error) {
	base, app := rootfs{}, rootfs{}
	for _, f := range s.files {
		if err := app.addFile(f.src, f.dst); err != nil {
			return "", err
		}
	}
	if err := base.addDebs(s.debs); err != nil {
		return "", err
	}
	if s.busybox {
		has := func(p string) bool { _, a := app[p]; _, b := base[p]; return a || b }
		if err := base.addBusybox(has); err != nil {
			return "", err
		}
	}
	if s.certs {
		if err := base.addFile(caBundle, caBundle); err != nil {
			return "", fmt.Errorf("CA bundle: %w (Debian's ca-certificates)", err)
		}
	}
	if err := addLibs(base, app); err != nil {
		return "", err
	}
	for short, long := range mergedUsr {
		base[short] = entry{typ: tar.TypeSymlink, mode: 0o777, link: long}
	}
	base["/tmp"] = entry{typ: tar.TypeDir, mode: 0o1777}

	img := empty.Image
	var labels []string
	for _, l := range []rootfs{base, app} {
		layer, err := newLayer(l)
		if err != nil {
			return "", err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return "", err
		}
	}
	for _, pkg := range append(append([]string{}, s.debs...), busyboxPkg(s)...) {
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", pkg).Output()
		if err != nil {
			return "", fmt.Errorf("dpkg-query -W %s: %w", pkg, err)
		}
		labels = append(labels, pkg+"="+string(out))
	}
	sort.Strings(labels)
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = s.entrypoint
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.ref.name": s.ref}
	if len(labels) > 0 {
		cfg.Config.Labels["io.diskforge.debian-packages"] = strings.Join(labels, " ")
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), writeLayoutTar(img, s.ref, file)
}

func busyboxPkg(s imageSpec) []string {
	if s.busybox {
		return []string{"busybox-static"}
	}
	return nil
}

// newLayer is the gzipped OCI layer of l.
func newLayer(l rootfs) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := l.tarball(&buf); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// writeLayoutTar writes img as an OCI image layout (named ref for containerd's import) into a tarball.
func writeLayoutTar(img v1.Image, ref, file string) error {
	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarDir(f, dir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// tarDir writes the files below dir, sorted, owner root, mtime 0.
func tarDir(w io.Writer, dir string) error {
	var files []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, rel := range files {
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
			}
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, rel := range files {
		raw, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(raw)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(raw); err != nil {
			return err
		}
	}
	return tw.Close()
}
