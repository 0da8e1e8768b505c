package nodeimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/diskforge/diskforge/tools/images/ociarchive"
)

// epoch is every entry's mtime: the same inputs give the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Image is one container image for the node's containerd: one layer of files, and how it starts.
type Image struct {
	// Ref is the name containerd gives it (registry/repository:tag), the one kubeadm's manifests use.
	Ref        string
	Entrypoint []string
	Files      Tree
}

// WriteTar writes the layer of t as a tar stream: parent directories first, sorted, owner root, mtime 0.
func (t Tree) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, p := range t.Paths() {
		e, ok := t[p]
		if !ok {
			e = Entry{Type: Directory}
		}
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: epoch, Uname: "root", Gname: "root",
			Format: tar.FormatPAX}
		switch e.Type {
		case Directory:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", tarMode(e.Mode, 0o755)
		case Symlink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		case Regular:
			h.Typeflag, h.Mode = tar.TypeReg, tarMode(e.Mode, 0o644)
			if err := writeRegular(tw, h, e); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeRegular writes a regular file's header and bytes, from e.Data or from the file e.Src.
func writeRegular(tw *tar.Writer, h *tar.Header, e Entry) error {
	var body io.Reader = bytes.NewReader(e.Data)
	h.Size = int64(len(e.Data))
	if e.Src != "" {
		f, err := os.Open(e.Src)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		h.Size, body = fi.Size(), f
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if n, err := io.Copy(tw, body); err != nil || n != h.Size {
		return fmt.Errorf("wrote %d of %d bytes (%v)", n, h.Size, err)
	}
	return nil
}

// tarMode is the tar header mode of m, or def when m is zero.
func tarMode(m fs.FileMode, def int64) int64 {
	if m == 0 {
		return def
	}
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// Write builds the image and writes it to file as an OCI image-layout tarball named for `ctr images import`;
// it returns the manifest digest.
func (img Image) Write(file string) (string, error) {
	var buf bytes.Buffer
	if err := img.Files.WriteTar(&buf); err != nil {
		return "", err
	}
	layer, err := ociarchive.Layer(buf.Bytes())
	if err != nil {
		return "", err
	}
	i, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", err
	}
	if i, err = ociarchive.Configure(i, img.Entrypoint, nil); err != nil {
		return "", err
	}
	digest, err := i.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), ociarchive.WriteFile(i, img.Ref, file)
}
