package nodeimage

import (
	"fmt"
	"io/fs"
)

// iptablesLegacy are the names kube-proxy runs, pointed at the legacy (x_tables) backend. Debian makes them
// with update-alternatives, whose links the package's file list lacks. Legacy, because kind's entrypoint picks
// legacy on a node whose network namespace has no rules yet (a podman node's), and kube-proxy must write the
// same tables as the node.
var iptablesLegacy = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save",
	"ip6tables-restore"}

// ComponentImages are the images the node's containerd holds: the control plane and kube-proxy kubeadm deploys
// (named as kubeadm names them for the version), etcd, CoreDNS, the pod sandbox and nodenet. Each takes the
// libraries its binary needs from the root, and kube-proxy Debian's iptables and conntrack too.
func ComponentImages(r Root, in Inputs) ([]Image, error) {
	bin := func(name, dst string) (Tree, error) {
		src, ok := in.Bins[name]
		if !ok {
			return nil, fmt.Errorf("no %s among the binaries", name)
		}
		return Tree{dst: Entry{Type: Regular, Mode: 0o755, Src: src}}, nil
	}
	var images []Image
	add := func(ref, name, dst string, extra Tree) error {
		t, err := bin(name, dst)
		if err != nil {
			return err
		}
		for p, e := range extra {
			t[p] = e
		}
		if err := r.WithLibs(t); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		// Merged /usr, as in the root: files are at their real paths below /usr, the loader at /lib64.
		for short, long := range map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"} {
			t[short] = Entry{Type: Symlink, Link: long}
		}
		t["/tmp"] = Entry{Type: Directory, Mode: fs.ModeSticky | 0o777}
		t["/run"] = Entry{Type: Directory, Mode: 0o755} // iptables' lock, which kubeadm's kube-proxy mounts there
		images = append(images, Image{Ref: ref, Entrypoint: []string{dst}, Files: t})
		return nil
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if err := add("registry.k8s.io/"+name+":"+in.KubeVersion, name, "/usr/local/bin/"+name, nil); err != nil {
			return nil, err
		}
	}
	// libxtables12 is named as well as found: iptables loads its match and target modules with dlopen.
	debs, err := r.Closure([]string{"iptables", "libxtables12", "conntrack"})
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's packages: %w", err)
	}
	for _, name := range iptablesLegacy {
		debs["/usr/sbin/"+name] = Entry{Type: Symlink, Link: "xtables-legacy-multi"}
	}
	steps := []struct {
		ref, name, dst string
		extra          Tree
	}{
		{"registry.k8s.io/kube-proxy:" + in.KubeVersion, "kube-proxy", "/usr/local/bin/kube-proxy", debs},
		{EtcdImage, "etcd", "/usr/local/bin/etcd", nil},
		{CoreDNSImage, "coredns", "/coredns", nil},
		{PauseImage, "pause", "/pause", nil},
		{NodenetImage, "nodenet", "/nodenet", nil},
	}
	for _, s := range steps {
		if err := add(s.ref, s.name, s.dst, s.extra); err != nil {
			return nil, err
		}
	}
	return images, nil
}
