package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/diskforge/diskforge/tools/images/ociarchive"
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
	imgLabels := map[string]string{"org.opencontainers.image.ref.name": s.ref}
	if len(labels) > 0 {
		imgLabels["io.diskforge.debian-packages"] = strings.Join(labels, " ")
	}
	img, err := ociarchive.Configure(img, s.entrypoint, imgLabels)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), ociarchive.WriteFile(img, s.ref, file)
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
	return ociarchive.Layer(buf.Bytes())
}
