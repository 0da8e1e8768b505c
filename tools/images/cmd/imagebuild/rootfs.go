package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is one file of a layer: a regular file copied from the host, a symlink or a directory.
type entry struct {
	typ  byte // tar.TypeReg, tar.TypeSymlink, tar.TypeDir
	mode int64
	src  string // host file of a regular file
	link string // symlink target
}

// rootfs is a layer's files by path in the image (absolute, clean).
type rootfs map[string]entry

// mergedUsr are the links of a merged-/usr Debian system; files are placed below /usr at their real paths.
var mergedUsr = map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}

// libDirs are where the dynamic loader looks (Debian amd64's ld.so.conf and defaults), in its order.
var libDirs = []string{"/usr/local/lib", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// realHostPath resolves the host path's directories (merged /usr) but not its last element.
func realHostPath(p string) (string, error) {
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(p)), nil
}

// addHost adds the host file at p (a regular file or a symlink, kept as such) at its real path.
func (r rootfs) addHost(p string) error {
	real, err := realHostPath(p)
	if err != nil {
		return err
	}
	if _, ok := r[real]; ok {
		return nil
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(real)
		if err != nil {
			return err
		}
		r[real] = entry{typ: tar.TypeSymlink, mode: 0o777, link: link}
		// The link's target comes too.
		target := link
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(real), link)
		}
		return r.addHost(target)
	case fi.Mode().IsRegular():
		r[real] = entry{typ: tar.TypeReg, mode: int64(modeBits(fi)), src: real}
	}
	return nil
}

// modeBits keeps permission, setuid and setgid bits as tar wants them.
func modeBits(fi os.FileInfo) os.FileMode {
	m := fi.Mode().Perm()
	if fi.Mode()&os.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		m |= 0o2000
	}
	return m
}

// addFile places the host file src at dst in the image.
func (r rootfs) addFile(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	r[path.Clean(dst)] = entry{typ: tar.TypeReg, mode: int64(modeBits(fi)), src: src}
	return nil
}

// addDebs adds the installed files of Debian packages, but documentation, manuals and locales.
func (r rootfs) addDebs(pkgs []string) error {
	for _, pkg := range pkgs {
		out, err := exec.Command("dpkg-query", "-L", pkg).Output()
		if err != nil {
			return fmt.Errorf("dpkg-query -L %s: %w (is the package installed? hack/deps.sh installs it)", pkg, err)
		}
		for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if p == "" || p == "/." || skipDebPath(p) {
				continue
			}
			fi, err := os.Lstat(p)
			if errors.Is(err, os.ErrNotExist) {
				continue // diverted or removed conffile
			}
			if err != nil {
				return err
			}
			if fi.IsDir() {
				continue
			}
			if err := r.addHost(p); err != nil {
				return fmt.Errorf("%s: %w", pkg, err)
			}
		}
	}
	return nil
}

func skipDebPath(p string) bool {
	for _, prefix := range []string{"/usr/share/doc", "/usr/share/man", "/usr/share/locale", "/usr/share/info",
		"/usr/share/lintian", "/usr/share/bash-completion", "/usr/share/bug", "/usr/share/doc-base"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
}

// addBusybox adds /usr/bin/busybox and a link for each applet whose path the image does not have yet.
func (r rootfs) addBusybox(has func(string) bool) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox: %w (Debian's busybox-static)", err)
	}
	if err := r.addFile(bb, "/usr/bin/busybox"); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, p := range strings.Fields(string(out)) {
		p = "/" + p
		for short, long := range mergedUsr {
			if strings.HasPrefix(p, short+"/") {
				p = "/" + long + strings.TrimPrefix(p, short)
			}
		}
		if has(p) {
			continue
		}
		r[p] = entry{typ: tar.TypeSymlink, mode: 0o777, link: "/usr/bin/busybox"}
	}
	return nil
}

// addLibs adds, for every ELF file of the layers, its interpreter and the shared libraries it needs, found as the
// dynamic loader would find them on this machine, until nothing is missing.
func addLibs(layers ...rootfs) error {
	into := layers[0]
	seen := map[string]bool{}
	for {
		var todo []string
		for _, l := range layers {
			for _, e := range l {
				if e.typ == tar.TypeReg && !seen[e.src] {
					seen[e.src] = true
					todo = append(todo, e.src)
				}
			}
		}
		if len(todo) == 0 {
			return nil
		}
		sort.Strings(todo)
		for _, src := range todo {
			needs, err := elfNeeds(src)
			if err != nil {
				return err
			}
			for _, n := range needs {
				if err := into.addHost(n); err != nil {
					return fmt.Errorf("%s needs %s: %w", src, n, err)
				}
			}
		}
	}
}

// elfNeeds is the host paths of the interpreter and libraries an ELF file needs; nothing for other files.
func elfNeeds(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, nil // not ELF
	}
	defer f.Close()
	var out []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, err
			}
			out = append(out, string(bytes.TrimRight(b, "\x00")))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, nil // static
	}
	for _, lib := range libs {
		found := ""
		for _, dir := range libDirs {
			if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
				found = filepath.Join(dir, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s: library %s not found in %v", file, lib, libDirs)
		}
		out = append(out, found)
	}
	return out, nil
}

var epoch = time.Unix(0, 0).UTC()

// tarball writes the layer: parent directories first, entries sorted, owner root, mtime 0.
func (r rootfs) tarball(w io.Writer) error {
	all := map[string]entry{}
	for p, e := range r {
		all[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = entry{typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		e := all[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: e.typ, Mode: e.mode, ModTime: epoch,
			Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.link
		case tar.TypeReg:
			fi, err := os.Stat(e.src)
			if err != nil {
				return err
			}
			h.Size = fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.typ == tar.TypeReg {
			f, err := os.Open(e.src)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", e.src, err)
			}
		}
	}
	return tw.Close()
}
