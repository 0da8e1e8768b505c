package nodeimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
)

// fakeRoot makes a small Debian-like root in a temporary directory: merged /usr, dpkg's file lists of the
// packages given (each path in the list becomes a copy of this machine's /bin/true, an ELF executable), the C
// library and its loader, and whatever extra files are named.
func fakeRoot(t *testing.T, pkgs map[string][]string, links map[string]string) Root {
	t.Helper()
	r := Root(t.TempDir())
	mustMkdir := func(p string) {
		if err := os.MkdirAll(r.Host(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/var/lib/dpkg/info", "/etc"} {
		mustMkdir(d)
	}
	for short, long := range map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"} {
		if err := os.Symlink(long, r.Host(short)); err != nil {
			t.Fatal(err)
		}
	}
	trueBin := copyHostFile(t, "/bin/true")
	// The C library and loader /bin/true needs, at the paths Debian's loader looks.
	for _, lib := range []struct{ host, dst string }{
		{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib64/ld-linux-x86-64.so.2", "/usr/lib64/ld-linux-x86-64.so.2"},
	} {
		if err := os.WriteFile(r.Host(lib.dst), copyHostFile(t, lib.host), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for pkg, files := range pkgs {
		list := []string{"/.", "/usr", "/usr/share/doc/" + pkg + "/copyright"}
		for _, f := range files {
			mustMkdir(filepath.Dir(f))
			if err := os.WriteFile(r.Host(f), trueBin, 0o755); err != nil {
				t.Fatal(err)
			}
			list = append(list, f)
		}
		if err := os.WriteFile(r.Host("/var/lib/dpkg/info/"+pkg+".list"), []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		mustMkdir(filepath.Dir(p))
		if err := os.Symlink(target, r.Host(p)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func copyHostFile(t *testing.T, p string) []byte {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("this test copies %s of this machine: %v", p, err)
	}
	return raw
}

// TestResolveStaysInRoot: links are followed inside the root; an absolute link means the root's own file, and
// ".." cannot climb out of it.
func TestResolveStaysInRoot(t *testing.T) {
	r := fakeRoot(t, map[string][]string{"iptables": {"/usr/sbin/xtables-legacy-multi"}}, map[string]string{
		"/etc/alternatives/iptables": "/usr/sbin/xtables-legacy-multi",
		"/usr/sbin/iptables":         "/etc/alternatives/iptables",
		"/usr/sbin/up":               "../../../../../../usr/sbin/iptables",
		"/usr/sbin/loop":             "loop",
	})
	cases := []struct{ in, want string }{
		{"/sbin/iptables", "/usr/sbin/xtables-legacy-multi"},
		{"/usr/sbin/up", "/usr/sbin/xtables-legacy-multi"},
		{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/../../etc", "/etc"},
	}
	for _, c := range cases {
		got, err := r.Resolve(c.in)
		if err != nil || got != c.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := r.Resolve("/usr/sbin/loop"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("Resolve of a link to itself: %v, want too many levels of symbolic links", err)
	}
	if _, err := r.Resolve("/usr/sbin/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Resolve of a missing file: %v, want not exist", err)
	}
}

// TestClosure: a package's files (documentation left out) at their real paths, the links on the way, and the
// libraries and loader their ELF files need, found in the root.
func TestClosure(t *testing.T) {
	r := fakeRoot(t, map[string][]string{"conntrack": {"/usr/sbin/conntrack"}},
		map[string]string{"/usr/sbin/ct": "conntrack"})
	// A link the package lists, below /sbin: it lands at its real path, and its target comes along.
	if err := os.WriteFile(r.Host("/var/lib/dpkg/info/ct.list"), []byte("/sbin/ct\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := r.Closure([]string{"conntrack", "ct"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/ld-linux-x86-64.so.2", "/usr/sbin/conntrack", "/usr/sbin/ct"}
	got := make([]string, 0, len(tree))
	for p := range tree {
		got = append(got, p)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("closure %v, want %v", got, want)
	}
	if e := tree["/usr/sbin/ct"]; e.Type != Symlink || e.Link != "conntrack" {
		t.Errorf("/usr/sbin/ct: %+v, want a link to conntrack", e)
	}
	if e := tree["/usr/sbin/conntrack"]; e.Type != Regular || e.Mode.Perm() != 0o755 {
		t.Errorf("/usr/sbin/conntrack: %+v, want an executable", e)
	}

	// A library nowhere in the root is an error that names it.
	if err := os.Remove(r.Host("/usr/lib/x86_64-linux-gnu/libc.so.6")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Closure([]string{"conntrack"}); err == nil || !strings.Contains(err.Error(), "libc.so.6") {
		t.Errorf("closure without libc: %v, want an error naming libc.so.6", err)
	}
	if _, err := r.Closure([]string{"nosuchpackage"}); err == nil || !strings.Contains(err.Error(), "nosuchpackage") {
		t.Errorf("closure of a package not installed: %v", err)
	}
}

// fakeInputs makes kind's base files and every binary as small files.
func fakeInputs(t *testing.T) Inputs {
	t.Helper()
	dir := t.TempDir()
	in := Inputs{KubeVersion: "v1.36.3", KindFiles: filepath.Join(dir, "kind"), Bins: map[string]string{}}
	for p := range kindFiles {
		f := filepath.Join(in.KindFiles, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("kind's "+p+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager",
		"kube-scheduler", "kube-proxy", "etcd", "coredns", "pause", "nodenet", "containerd",
		"containerd-shim-runc-v2", "ctr", "bridge", "host-local", "loopback"} {
		f := filepath.Join(dir, "bin", name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		in.Bins[name] = f
	}
	return in
}

// TestAssemble: on a debootstrap-like root, the node's files land at kind's paths (through merged /usr), kind's
// unwanted units go, the node's units are enabled and systemd-sysctl masked; a second run changes nothing more.
func TestAssemble(t *testing.T) {
	r := fakeRoot(t, nil, map[string]string{
		"/lib/systemd/system/multi-user.target.wants/getty.target":                "../getty.target",
		"/etc/systemd/system/getty.target.wants/getty@tty1.service":               "/lib/systemd/system/getty@.service",
		"/lib/systemd/system/sockets.target.wants/systemd-udevd.socket":           "../systemd-udevd.socket",
		"/lib/systemd/system/sockets.target.wants/dbus.socket":                    "../dbus.socket",
		"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service": "../systemd-tmpfiles-setup.service",
	})
	// The unit a removed link pointed to stays.
	if err := os.WriteFile(r.Host("/usr/lib/systemd/system/systemd-tmpfiles-setup.service"), []byte("[Unit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(r.Host("/usr/lib/systemd/system/basic.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.Host("/etc/systemd/journald.conf"), []byte("[Journal]\n#Storage=auto"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := fakeInputs(t)
	for range 2 {
		if err := r.Assemble(in); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{
		"/usr/bin/kubelet":                        "echo kubelet",
		"/usr/local/bin/ctr":                      "echo ctr",
		"/opt/cni/bin/host-local":                 "echo host-local",
		"/usr/local/bin/entrypoint":               "kind's /usr/local/bin/entrypoint",
		"/kind/version":                           "v1.36.3",
		"/etc/containerd/config.toml":             "sandbox = '" + PauseImage + "'",
		"/etc/systemd/journald.conf":              "#Storage=auto\nReadKMsg=no\n",
		"/kind/manifests/default-cni.yaml":        "image: " + NodenetImage,
		"/etc/systemd/system/kind-images.service": "Before=kubelet.service",
	} {
		raw, err := os.ReadFile(r.Host(p))
		if err != nil || !strings.Contains(string(raw), want) {
			t.Errorf("%s: %q, %v; want it to contain %q", p, raw, err, want)
		}
	}
	for p, mode := range map[string]fs.FileMode{"/usr/bin/kubeadm": 0o755, "/kind/bin/import-images.sh": 0o755,
		"/kind/bin/undo-mount-hacks.sh": 0o755, "/etc/default/kubelet": 0o644} {
		if fi, err := os.Stat(r.Host(p)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, mode)
		}
	}
	for p, want := range map[string]string{
		"/etc/systemd/system/multi-user.target.wants/kubelet.service":     "/etc/systemd/system/kubelet.service",
		"/etc/systemd/system/multi-user.target.wants/kind-images.service": "/etc/systemd/system/kind-images.service",
		"/etc/systemd/system/systemd-sysctl.service":                      "/dev/null",
		"/etc/systemd/system/systemd-binfmt.service":                      "/dev/null",
	} {
		if got, err := os.Readlink(r.Host(p)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want -> %q", p, got, err, want)
		}
	}
	for _, gone := range []string{"/usr/lib/systemd/system/multi-user.target.wants/getty.target",
		"/etc/systemd/system/getty.target.wants/getty@tty1.service",
		"/usr/lib/systemd/system/sockets.target.wants/systemd-udevd.socket"} {
		if _, err := os.Lstat(r.Host(gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	if _, err := os.Lstat(r.Host("/usr/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("systemd-tmpfiles-setup is still wanted (%v)", err)
	}
	if _, err := os.Stat(r.Host("/usr/lib/systemd/system/systemd-tmpfiles-setup.service")); err != nil {
		t.Errorf("the unit itself went with its link: %v", err)
	}
	if _, err := os.Lstat(r.Host("/usr/lib/systemd/system/sockets.target.wants/dbus.socket")); err != nil {
		t.Errorf("dbus.socket, which kind keeps, is gone: %v", err)
	}
	if raw, _ := os.ReadFile(r.Host("/etc/systemd/system/containerd.service")); strings.Contains(string(raw), "LimitNOFILE") ||
		strings.Contains(string(raw), "OOMScoreAdjust") {
		t.Errorf("containerd's unit sets limits a node without CAP_SYS_RESOURCE cannot set:\n%s", raw)
	}
	// Directories that did not exist are made; merged /usr's links stay links.
	if fi, err := os.Lstat(r.Host("/lib")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("/lib is no longer a link: %v %v", fi, err)
	}
	if fi, err := os.Stat(r.Host("/etc/kubernetes/manifests")); err != nil || !fi.IsDir() {
		t.Errorf("/etc/kubernetes/manifests: %v", err)
	}
}

// TestAssembleNeedsEveryPart: a missing binary or kind file is named, before the root is half changed.
func TestAssembleNeedsEveryPart(t *testing.T) {
	in := fakeInputs(t)
	delete(in.Bins, "kubeadm")
	if _, err := NodeFiles(in); err == nil || !strings.Contains(err.Error(), "kubeadm") {
		t.Errorf("without kubeadm: %v", err)
	}
	in = fakeInputs(t)
	if err := os.Remove(filepath.Join(in.KindFiles, "usr/local/bin/entrypoint")); err != nil {
		t.Fatal(err)
	}
	if _, err := NodeFiles(in); err == nil || !strings.Contains(err.Error(), "entrypoint") {
		t.Errorf("without kind's entrypoint: %v", err)
	}
}

// TestComponentImages: the images kubeadm v1.36.3's manifests name, each with its binary at the path the
// manifests run, and kube-proxy with iptables (legacy) and its libraries.
func TestComponentImages(t *testing.T) {
	r := fakeRoot(t, map[string][]string{
		"iptables":     {"/usr/sbin/xtables-legacy-multi", "/usr/sbin/xtables-nft-multi"},
		"libxtables12": {"/usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so"},
		"conntrack":    {"/usr/sbin/conntrack"},
	}, nil)
	in := fakeInputs(t)
	// A dynamically linked binary takes its C library from the root.
	if err := os.WriteFile(in.Bins["kube-apiserver"], copyHostFile(t, "/bin/true"), 0o755); err != nil {
		t.Fatal(err)
	}
	images, err := ComponentImages(r, in)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	byRef := map[string]Image{}
	for _, img := range images {
		refs = append(refs, img.Ref)
		byRef[img.Ref] = img
	}
	slices.Sort(refs)
	want := []string{"diskforge.local/kind-nodenet:dev", "diskforge.local/pause:3.10.2",
		"registry.k8s.io/coredns/coredns:v1.14.2", "registry.k8s.io/etcd:3.6.8-0",
		"registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-proxy:v1.36.3", "registry.k8s.io/kube-scheduler:v1.36.3"}
	if !slices.Equal(refs, want) {
		t.Fatalf("images %v, want %v", refs, want)
	}
	// kubeadm runs "kube-apiserver" (on PATH), "/usr/local/bin/kube-proxy" and "etcd"; CoreDNS's image starts /coredns.
	for ref, p := range map[string]string{"registry.k8s.io/kube-apiserver:v1.36.3": "/usr/local/bin/kube-apiserver",
		"registry.k8s.io/kube-proxy:v1.36.3": "/usr/local/bin/kube-proxy", EtcdImage: "/usr/local/bin/etcd",
		CoreDNSImage: "/coredns"} {
		if e, ok := byRef[ref].Files[p]; !ok || e.Type != Regular {
			t.Errorf("%s has no %s", ref, p)
		}
	}
	api := byRef["registry.k8s.io/kube-apiserver:v1.36.3"].Files
	if _, ok := api["/usr/lib/x86_64-linux-gnu/libc.so.6"]; !ok {
		t.Errorf("kube-apiserver's image lacks the C library its binary needs")
	}
	if e := api["/lib64"]; e.Type != Symlink || e.Link != "usr/lib64" {
		t.Errorf("kube-apiserver's /lib64 (the loader's directory): %+v", e)
	}
	proxy := byRef["registry.k8s.io/kube-proxy:v1.36.3"].Files
	for _, p := range []string{"/usr/sbin/conntrack", "/usr/sbin/xtables-legacy-multi", "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so"} {
		if _, ok := proxy[p]; !ok {
			t.Errorf("kube-proxy's image lacks %s", p)
		}
	}
	if e := proxy["/usr/sbin/iptables-restore"]; e.Type != Symlink || e.Link != "xtables-legacy-multi" {
		t.Errorf("kube-proxy's iptables-restore: %+v, want a link to xtables-legacy-multi", e)
	}
}

// TestImageWrite: the same image twice gives the same digest and bytes, named for containerd's import.
func TestImageWrite(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: "registry.k8s.io/etcd:3.6.8-0", Entrypoint: []string{"/prog"},
		Files: Tree{"/prog": {Type: Regular, Mode: 0o755, Src: bin}, "/tmp": {Type: Directory, Mode: fs.ModeSticky | 0o777}}}
	var digests []string
	var files [][]byte
	for i := range 2 {
		file := filepath.Join(dir, "out.tar")
		d, err := img.Write(file)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		digests, files = append(digests, d), append(files, raw)
		if err := os.Chtimes(bin, epoch.AddDate(0, 0, i+1), epoch.AddDate(0, 0, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] != digests[1] || !bytes.Equal(files[0], files[1]) {
		t.Fatalf("two writes differ: %s, %s", digests[0], digests[1])
	}
	index := tarFile(t, files[0], "index.json")
	if !strings.Contains(index, `"io.containerd.image.name": "registry.k8s.io/etcd:3.6.8-0"`) {
		t.Errorf("index.json does not name the image for containerd: %s", index)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".layout-*")); len(leftovers) > 0 {
		t.Errorf("temporary layouts left: %v", leftovers)
	}
}

func tarFile(t *testing.T, archive []byte, name string) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the archive: %v", name, err)
		}
		if h.Name == name {
			raw, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(raw)
		}
	}
}

// TestCNIManifestIsKindsTemplate: kind fills the pod subnet in with text/template and patches the first
// container's env list, as it does for kindnetd's manifest; both only when the markers are there.
func TestCNIManifestIsKindsTemplate(t *testing.T) {
	m := CNIManifest()
	for _, marker := range []string{"would you kindly template this file", "would you kindly patch this file"} {
		if !strings.Contains(m, marker) {
			t.Errorf("the manifest lacks kind's marker %q", marker)
		}
	}
	tpl, err := template.New("cni").Parse(m)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tpl.Execute(&out, struct{ PodSubnet string }{"10.244.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `value: "10.244.0.0/16"`) {
		t.Errorf("the pod subnet is not filled in:\n%s", out.String())
	}
	if strings.Count(out.String(), "kind: DaemonSet") != 1 || !strings.Contains(out.String(), "          env:\n") {
		t.Errorf("kind's patch adds to the env list of the one DaemonSet's first container:\n%s", out.String())
	}
}

// TestUpstreamPinsMatchImages: the etcd and CoreDNS images are named for the versions their modules pin.
func TestUpstreamPinsMatchImages(t *testing.T) {
	for mod, want := range map[string]string{
		"../upstream/etcd/go.mod":    "go.etcd.io/etcd/server/v3 v" + strings.TrimSuffix(EtcdImage[strings.LastIndex(EtcdImage, ":")+1:], "-0"),
		"../upstream/coredns/go.mod": "github.com/coredns/coredns " + CoreDNSImage[strings.LastIndex(CoreDNSImage, ":")+1:],
	} {
		raw, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), "require "+want+"\n") && !strings.Contains(string(raw), "\t"+want+"\n") {
			t.Errorf("%s does not require %s", mod, want)
		}
	}
}
