package images

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImagesHoldTheirEntrypoints opens every image make image built (IMAGES_DIR, default ../../_output/images)
// and checks that its entrypoint, every program the image promises, their ELF interpreters and shared libraries,
// and the targets of script interpreters are in the image.
func TestImagesHoldTheirEntrypoints(t *testing.T) {
	dir := os.Getenv("IMAGES_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "_output", "images")
	}
	index, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Skipf("no images built (%v): run make image", err)
	}
	// Programs each image must run besides its entrypoint (the driver's: what mount-utils and the node run).
	needs := map[string][]string{
		"docker.io/diskforge/driver:dev": {"mount", "umount", "blkid", "fsck", "mkfs.ext4", "mkfs.xfs", "e2fsck",
			"resize2fs", "dumpe2fs", "xfs_growfs", "xfs_info", "fsck.xfs", "mkfs.ext3", "fsck.ext3", "losetup", "blockdev", "sh"},
		"docker.io/diskforge/fakecloud:dev":                {"losetup", "blockdev"},
		"diskforge.local/e2e-test-images/busybox:1.37.0-1": {"sh", "sleep", "dd", "sha256sum", "df", "blockdev", "mount"},
		"diskforge.local/e2e-test-images/agnhost:2.63.0":   {"sh"},
		// multiVolume's block writes use GNU dd's oflag=nocache, run by a sh that is not BusyBox's.
		"diskforge.local/e2e-test-images/glibc-dns-testing:2.0.0": {"sh", "dash", "dd", "sha256sum", "base64"},
	}
	sc := bufio.NewScanner(strings.NewReader(string(index)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		ref, file := f[0], f[2]
		t.Run(ref, func(t *testing.T) {
			img := openImage(t, filepath.Join(dir, file), ref)
			fs := flatten(t, img)
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Config.Entrypoint) == 0 {
				t.Fatal("no entrypoint")
			}
			fs.requireRunnable(t, cfg.Config.Entrypoint[0])
			for _, prog := range needs[ref] {
				fs.requireRunnable(t, fs.which(t, prog))
			}
		})
	}
}

func openImage(t *testing.T, tarball, ref string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			_ = os.MkdirAll(p, 0o755)
			continue
		}
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		raw, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index of %s: %+v, want one image named %s", tarball, m.Manifests, ref)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// imageFS is an image's flattened files: regular files' contents and symlinks' targets.
type imageFS struct {
	files map[string][]byte
	links map[string]string
	modes map[string]int64
}

func flatten(t *testing.T, img v1.Image) *imageFS {
	t.Helper()
	fs := &imageFS{files: map[string][]byte{}, links: map[string]string{}, modes: map[string]int64{}}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fs
		}
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeReg:
			raw, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			fs.files[p], fs.modes[p] = raw, h.Mode
		case tar.TypeSymlink:
			fs.links[p] = h.Linkname
		}
	}
}

// resolve follows symlinks (in any path element) to a regular file's path; "" if there is none.
func (fs *imageFS) resolve(p string) string {
	for hops := 0; hops < 40; hops++ {
		parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
		changed := false
		for i := range parts {
			prefix := "/" + strings.Join(parts[:i+1], "/")
			if target, ok := fs.links[prefix]; ok {
				if !path.IsAbs(target) {
					target = path.Join(path.Dir(prefix), target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				changed = true
				break
			}
		}
		if !changed {
			if _, ok := fs.files[p]; ok {
				return p
			}
			return ""
		}
	}
	return ""
}

func (fs *imageFS) which(t *testing.T, prog string) string {
	t.Helper()
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if fs.resolve(path.Join(dir, prog)) != "" {
			return path.Join(dir, prog)
		}
	}
	t.Fatalf("%s is not in the image's PATH", prog)
	return ""
}

// requireRunnable checks that p is an executable file whose interpreter (#! or ELF) and libraries are there.
func (fs *imageFS) requireRunnable(t *testing.T, p string) {
	t.Helper()
	real := fs.resolve(p)
	if real == "" {
		t.Fatalf("%s is not in the image", p)
	}
	if fs.modes[real]&0o111 == 0 {
		t.Fatalf("%s (%s) is not executable", p, real)
	}
	raw := fs.files[real]
	if strings.HasPrefix(string(raw), "#!") {
		line, _, _ := strings.Cut(string(raw[2:]), "\n")
		interp := strings.Fields(line)
		if len(interp) == 0 {
			t.Fatalf("%s: empty #! line", p)
		}
		fs.requireRunnable(t, interp[0])
		return
	}
	f, err := elf.NewFile(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("%s: neither a script nor ELF: %v", p, err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(prog.Open())
			interp := strings.TrimRight(string(b), "\x00")
			if fs.resolve(interp) == "" {
				t.Fatalf("%s: interpreter %s missing", p, interp)
			}
		}
	}
	libs, _ := f.ImportedLibraries()
	for _, lib := range libs {
		found := false
		for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
			if fs.resolve(path.Join(dir, lib)) != "" {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("%s: library %s missing", p, lib)
		}
	}
}
