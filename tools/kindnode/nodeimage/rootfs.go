package nodeimage

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Root is a Debian root filesystem in a directory of this machine (debootstrap's output). Paths given to its
// methods are paths inside it ("/usr/sbin/iptables"); symlinks are followed inside it, never out of it, since
// an absolute link (/etc/alternatives/...) means the root's own file, not this machine's.
type Root string

// maxLinks bounds symlink chains, as the kernel does (ELOOP).
const maxLinks = 40

// Resolve returns the real path inside the root of p, every symlink followed (the last element too).
func (r Root) Resolve(p string) (string, error) {
	return r.resolve(p, true)
}

// resolveDir returns the real path of p's directories; the last element is kept as it is (it may be a link).
func (r Root) resolveDir(p string) (string, error) {
	return r.resolve(p, false)
}

func (r Root) resolve(p string, last bool) (string, error) {
	links := 0
	todo := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		if len(todo) == 0 && !last {
			return next, nil
		}
		fi, err := os.Lstat(r.Host(next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(r.Host(next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(strings.Trim(target, "/"), "/"), todo...)
	}
	return cur, nil
}

// Host is the machine's path of p inside the root (no symlink followed).
func (r Root) Host(p string) string {
	return filepath.Join(string(r), filepath.FromSlash(path.Clean("/"+p)))
}

// PackageFiles lists the files (not directories) a Debian package installed in the root, from dpkg's database.
func (r Root) PackageFiles(pkg string) ([]string, error) {
	var raw []byte
	var err error
	for _, name := range []string{pkg + ".list", pkg + ":amd64.list"} {
		raw, err = os.ReadFile(r.Host("/var/lib/dpkg/info/" + name))
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("package %s is not installed in %s: %w", pkg, string(r), err)
	}
	var files []string
	for _, p := range strings.Split(string(raw), "\n") {
		if p == "" || p == "/." || docPath(p) {
			continue
		}
		fi, err := os.Lstat(r.Host(p))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a diverted or removed conffile
		}
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, p)
		}
	}
	return files, nil
}

// docPath reports paths no container needs: documentation, manuals, translations.
func docPath(p string) bool {
	for _, dir := range []string{"/usr/share/doc", "/usr/share/man", "/usr/share/locale", "/usr/share/info",
		"/usr/share/lintian", "/usr/share/bug", "/usr/share/bash-completion"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// libDirs are where Debian amd64's dynamic loader looks, in its order.
var libDirs = []string{"/usr/local/lib", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
	"/usr/lib64", "/lib", "/usr/lib"}

// elfNeeds returns the root's paths of the interpreter and the shared libraries an ELF file needs, as the
// root's dynamic loader would find them; nothing for a file that is not a dynamic ELF file.
func (r Root) elfNeeds(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, nil // not ELF: a script, a config file
	}
	defer f.Close()
	var needs []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("%s: interpreter: %w", file, err)
			}
			needs = append(needs, string(bytes.TrimRight(b, "\x00")))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return needs, nil // static
	}
	for _, lib := range libs {
		found := ""
		for _, dir := range libDirs {
			if _, err := os.Stat(r.Host(path.Join(dir, lib))); err == nil {
				found = path.Join(dir, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, which is not in %s's %v", file, lib, string(r), libDirs)
		}
		needs = append(needs, found)
	}
	return needs, nil
}

// Closure returns the files of the packages plus every link on the way to them and every library their ELF
// files need, transitively, as image entries at their real paths in the root (merged /usr: /sbin/x is
// /usr/sbin/x).
func (r Root) Closure(pkgs []string) (Tree, error) {
	t := Tree{}
	var todo []string
	for _, pkg := range pkgs {
		files, err := r.PackageFiles(pkg)
		if err != nil {
			return nil, err
		}
		todo = append(todo, files...)
	}
	return t, r.complete(t, todo)
}

// WithLibs adds to t the libraries (and the loader) that its files from this machine need, from the root: a
// binary built here against the same Debian release runs on the root's C library.
func (r Root) WithLibs(t Tree) error {
	var todo []string
	for _, p := range t.Paths() {
		if e, ok := t[p]; ok && e.Type == Regular && e.Src != "" {
			needs, err := r.elfNeeds(e.Src)
			if err != nil {
				return err
			}
			todo = append(todo, needs...)
		}
	}
	return r.complete(t, todo)
}

// complete adds the root's files todo to t, and what they need, until nothing is missing.
func (r Root) complete(t Tree, todo []string) error {
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		more, err := r.addTo(t, p)
		if err != nil {
			return err
		}
		todo = append(todo, more...)
	}
	return nil
}

// addTo adds the root's file p to t, a symlink as a symlink (and its target), and returns the paths that must
// come too: a link's target, a new ELF file's libraries.
func (r Root) addTo(t Tree, p string) ([]string, error) {
	real, err := r.resolveDir(p)
	if err != nil {
		return nil, err
	}
	if _, ok := t[real]; ok {
		return nil, nil
	}
	host := r.Host(real)
	fi, err := os.Lstat(host)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(host)
		if err != nil {
			return nil, err
		}
		t[real] = Entry{Type: Symlink, Link: link}
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(real), link)
		}
		return []string{link}, nil
	case fi.Mode().IsRegular():
		t[real] = Entry{Type: Regular, Mode: modeBits(fi), Src: host}
		return r.elfNeeds(host)
	}
	return nil, nil // a device or socket: nothing an image takes
}

// Entry is one file of an image layer or of the node's root filesystem.
type Entry struct {
	Type EntryType
	Mode fs.FileMode // permissions with setuid/setgid/sticky as fs.ModeSetuid...; 0 means 0644 or 0755 by type
	Src  string      // the machine's file holding a regular file's bytes (or Data)
	Data []byte      // a regular file's bytes when Src is empty
	Link string      // a symlink's target
}

// EntryType says what an Entry is.
type EntryType int

// The kinds of Entry.
const (
	Regular EntryType = iota
	Symlink
	Directory
)

// Tree is a set of entries by absolute, clean path.
type Tree map[string]Entry

// Paths returns the tree's paths with every parent directory, sorted.
func (t Tree) Paths() []string {
	all := map[string]bool{}
	for p := range t {
		for d := p; d != "/" && !all[d]; d = path.Dir(d) {
			all[d] = true
		}
	}
	out := make([]string, 0, len(all))
	for p := range all {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// modeBits keeps a file's permission, setuid, setgid and sticky bits.
func modeBits(fi fs.FileInfo) fs.FileMode {
	return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}
