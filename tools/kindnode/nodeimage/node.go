// Package nodeimage assembles a kind node image without a registry: what kind's base image
// (sigs.k8s.io/kind images/base) and `kind build node-image` (pkg/build/nodeimage) would make, from a Debian
// root filesystem (debootstrap) and binaries built from source here.
//
// What kind expects of a node image, and where each part comes from:
//
//   - kind's own files, copied from its module: the entrypoint (/usr/local/bin/entrypoint, which fixes mounts
//     and cgroups and then execs systemd), /kind/bin, the kubelet unit and its kubeadm drop-ins, sysctl.d and
//     /etc/default/kubelet.
//   - systemd as PID 1 with kind's cleanup of units (no udev, no getty, nothing a container does not need) and
//     containerd, kubelet and undo-mount-hacks enabled; the kubelet starts once kubeadm wrote its config.
//   - kubeadm, kubelet and kubectl in /usr/bin, containerd in /usr/local/bin, the CNI plugins in /opt/cni/bin,
//     the Kubernetes version in /kind/version, the CNI manifest kind applies in /kind/manifests/default-cni.yaml.
//   - in containerd, the images kubeadm's manifests name (kube-apiserver, kube-controller-manager,
//     kube-scheduler, kube-proxy, etcd, CoreDNS), the pod sandbox and the CNI's daemon. kind imports them at
//     build time in a running container; here they are OCI tarballs in /kind/images, imported by a unit
//     ordered before the kubelet on every node's first start.
//
// Where this image departs from kind's, and why: containerd's unit sets no resource limits and its config
// restricts oom_score_adj (a container without CAP_SYS_RESOURCE, as on this project's machines, cannot raise
// limits or lower scores); systemd-sysctl and systemd-binfmt are masked (a privileged node writes the host's
// kernel-wide settings: kernel.pid_max, fs.protected_*); the CNI is nodenet (this module), not kindnetd, which
// no module proxy serves; there is no default storage manifest, so kind falls back to its host-path class.
package nodeimage

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The images of the node's containerd that are not named after the Kubernetes version. Etcd and CoreDNS are
// the versions kubeadm v1.36.3 deploys (its DefaultEtcdVersion and CoreDNSVersion), built from the pins of
// tools/kindnode/upstream; the sandbox is the pause of tools/images, as on the local e2e cluster.
const (
	EtcdImage    = "registry.k8s.io/etcd:3.6.8-0"
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.2"
	PauseImage   = "diskforge.local/pause:3.10.2"
	NodenetImage = "diskforge.local/kind-nodenet:dev"
)

// Inputs are what the node image is made of.
type Inputs struct {
	// KubeVersion is the Kubernetes version of the binaries (v1.36.3): /kind/version and the image tags.
	KubeVersion string
	// KindFiles is kind's images/base/files directory, in the module cache.
	KindFiles string
	// Bins are the binaries by name: kubeadm, kubelet, kubectl, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kube-proxy, etcd, coredns, pause, nodenet, containerd, containerd-shim-runc-v2, ctr,
	// bridge, host-local, loopback.
	Bins map[string]string
}

// binDirs are where each binary goes in the node: kind's layout.
var binDirs = map[string][]string{
	"/usr/bin":       {"kubeadm", "kubelet", "kubectl"},
	"/usr/local/bin": {"containerd", "containerd-shim-runc-v2", "ctr"},
	"/opt/cni/bin":   {"bridge", "host-local", "loopback"},
}

// kindFiles are the files of kind's base image the node takes as they are (path below KindFiles = path in the
// node), with their modes. kind's containerd config and unit are replaced (containerdConfig, containerdUnit);
// its fuse-overlayfs snapshotter (rootless kind) is not built.
var kindFiles = map[string]fs.FileMode{
	"/usr/local/bin/entrypoint":                             0o755,
	"/kind/bin/mount-product-files.sh":                      0o755,
	"/kind/bin/undo-mount-hacks.sh":                         0o755,
	"/kind/bin/create-kubelet-cgroup-v2.sh":                 0o755,
	"/etc/systemd/system/kubelet.service":                   0o644,
	"/etc/systemd/system/kubelet.slice":                     0o644,
	"/etc/systemd/system/undo-mount-hacks.service":          0o644,
	"/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": 0o644,
	"/etc/systemd/system/kubelet.service.d/11-kind.conf":    0o644,
	"/etc/default/kubelet":                                  0o644,
	"/etc/sysctl.d/10-network-magic.conf":                   0o644,
	"/etc/sysctl.d/10-network-security.conf":                0o644,
	"/etc/crictl.yaml":                                      0o644,
}

// enabled are the units started at boot; masked those that must never run in a node.
var (
	enabled = []string{"containerd.service", "kubelet.service", "undo-mount-hacks.service", "kind-images.service"}
	masked  = []string{"systemd-binfmt.service", "systemd-sysctl.service"}
)

// unwantedUnits are removed as kind's base image removes them: links that start what a node container does not
// need (udev, getty, timers, the tmpfiles setup that would clean /tmp of kind's files).
var unwantedUnits = []string{
	"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
	"/lib/systemd/system/multi-user.target.wants/*",
	"/etc/systemd/system/*.wants/*",
	"/lib/systemd/system/local-fs.target.wants/*",
	"/lib/systemd/system/sockets.target.wants/*udev*",
	"/lib/systemd/system/sockets.target.wants/*initctl*",
	"/lib/systemd/system/basic.target.wants/*",
}

// NodeFiles is every file the node image adds to the Debian root filesystem.
func NodeFiles(in Inputs) (Tree, error) {
	t := Tree{}
	for dir, names := range binDirs {
		for _, name := range names {
			src, ok := in.Bins[name]
			if !ok {
				return nil, fmt.Errorf("no %s among the binaries", name)
			}
			t[path.Join(dir, name)] = Entry{Type: Regular, Mode: 0o755, Src: src}
		}
	}
	for p, mode := range kindFiles {
		src := filepath.Join(in.KindFiles, filepath.FromSlash(p))
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("kind's base image files: %w", err)
		}
		t[p] = Entry{Type: Regular, Mode: mode, Src: src}
	}
	for p, data := range map[string]string{
		"/etc/containerd/config.toml":                          containerdConfig,
		"/etc/systemd/system/containerd.service":               containerdUnit,
		"/etc/systemd/system/kind-images.service":              imagesUnit,
		"/etc/systemd/system/kubelet.service.d/20-images.conf": kubeletAfterImages,
		"/kind/version":                    in.KubeVersion,
		"/kind/manifests/default-cni.yaml": CNIManifest(),
	} {
		t[p] = Entry{Type: Regular, Mode: 0o644, Data: []byte(data)}
	}
	t["/kind/bin/import-images.sh"] = Entry{Type: Regular, Mode: 0o755, Data: []byte(importImagesScript)}
	t["/etc/kubernetes/manifests"] = Entry{Type: Directory, Mode: 0o755}
	t["/kind/images"] = Entry{Type: Directory, Mode: 0o755}
	for _, unit := range enabled {
		t["/etc/systemd/system/multi-user.target.wants/"+unit] = Entry{Type: Symlink, Link: "/etc/systemd/system/" + unit}
	}
	for _, unit := range masked {
		t["/etc/systemd/system/"+unit] = Entry{Type: Symlink, Link: "/dev/null"}
	}
	return t, nil
}

// Assemble turns the Debian root filesystem into a node's: kind's unit cleanup, then the node's files, then
// journald told not to read the host's kernel log (kind does the same: the host's messages would confuse).
func (r Root) Assemble(in Inputs) error {
	t, err := NodeFiles(in) // first: a missing part fails before the root is changed
	if err != nil {
		return err
	}
	for _, pattern := range unwantedUnits {
		// The directories before the first wildcard are resolved in the root (/lib is usr/lib); the rest is globbed.
		dir, rest := path.Dir(pattern), path.Base(pattern) // the last element is never followed: it is removed
		for strings.Contains(dir, "*") {
			dir, rest = path.Dir(dir), path.Join(path.Base(dir), rest)
		}
		real, err := r.Resolve(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", pattern, err)
		}
		matches, err := filepath.Glob(filepath.Join(r.Host(real), filepath.FromSlash(rest)))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				return err
			}
		}
	}
	if err := r.Install(t); err != nil {
		return err
	}
	return r.appendLine("/etc/systemd/journald.conf", "ReadKMsg=no")
}

// Install writes the tree's entries into the root, creating missing directories and replacing what is there.
func (r Root) Install(t Tree) error {
	for _, p := range t.Paths() {
		e, ok := t[p]
		if !ok {
			e = Entry{Type: Directory}
		}
		real, err := r.mkdirParents(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		host := r.Host(real)
		if e.Type == Directory {
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				continue // an existing directory, or a link to one (merged /usr's /lib)
			}
			if err := os.Mkdir(host, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.RemoveAll(host); err != nil {
			return err
		}
		if e.Type == Symlink {
			if err := os.Symlink(e.Link, host); err != nil {
				return err
			}
			continue
		}
		data := e.Data
		if e.Src != "" {
			if data, err = os.ReadFile(e.Src); err != nil {
				return err
			}
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(host, data, mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(host, mode); err != nil { // WriteFile's mode passes through the umask
			return err
		}
	}
	return nil
}

// mkdirParents resolves p's directories inside the root, creating the missing ones, and returns p's real path.
func (r Root) mkdirParents(p string) (string, error) {
	dir := path.Dir(path.Clean("/" + p))
	real, err := r.Resolve(dir)
	if os.IsNotExist(err) {
		parent, err := r.mkdirParents(dir)
		if err != nil {
			return "", err
		}
		if err := os.Mkdir(r.Host(parent), 0o755); err != nil && !os.IsExist(err) {
			return "", err
		}
		real, err = r.Resolve(dir)
		if err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	return path.Join(real, path.Base(p)), nil
}

// appendLine adds a line to a file of the root unless it is there already.
func (r Root) appendLine(p, line string) error {
	real, err := r.Resolve(p)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(r.Host(real))
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(l) == line {
			return nil
		}
	}
	if len(raw) > 0 && !strings.HasSuffix(string(raw), "\n") {
		raw = append(raw, '\n')
	}
	return os.WriteFile(r.Host(real), append(raw, line+"\n"...), 0o644)
}
