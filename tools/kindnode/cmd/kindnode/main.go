// Command kindnode turns a Debian root filesystem into a kind node's (package nodeimage): kind's files, the
// binaries, the units, and the container images of the control plane, kube-proxy, etcd, CoreDNS, the sandbox
// and nodenet as OCI tarballs in /kind/images. hack/build-kind-node-image.sh runs it on a copy of the
// debootstrap root and imports the result as the node image.
//
// Usage: kindnode -root DIR -kind-files DIR -kube-version v1.36.3 -bin DIR[,DIR...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskforge/diskforge/tools/kindnode/nodeimage"
)

// binaries are the names nodeimage.Inputs.Bins must hold.
var binaries = []string{"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager",
	"kube-scheduler", "kube-proxy", "etcd", "coredns", "pause", "nodenet", "containerd", "containerd-shim-runc-v2",
	"ctr", "bridge", "host-local", "loopback"}

func main() {
	root := flag.String("root", "", "the Debian root filesystem to turn into the node's (changed in place)")
	kindFiles := flag.String("kind-files", "", "kind's images/base/files directory (sigs.k8s.io/kind in the module cache)")
	version := flag.String("kube-version", "", "the Kubernetes version of the binaries, e.g. v1.36.3")
	bins := flag.String("bin", "", "comma-separated directories to find the binaries in (and in their cni/), first match wins")
	flag.Parse()
	if err := run(*root, *kindFiles, *version, strings.Split(*bins, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "kindnode:", err)
		os.Exit(1)
	}
}

func run(root, kindFiles, version string, binDirs []string) error {
	if root == "" || kindFiles == "" || !strings.HasPrefix(version, "v") {
		return errors.New("-root, -kind-files and -kube-version (vX.Y.Z) are required")
	}
	in := nodeimage.Inputs{KubeVersion: version, KindFiles: kindFiles, Bins: map[string]string{}}
	for _, name := range binaries {
		found, err := find(name, binDirs)
		if err != nil {
			return err
		}
		in.Bins[name] = found
	}
	r := nodeimage.Root(root)
	if err := r.Assemble(in); err != nil {
		return err
	}
	images, err := nodeimage.ComponentImages(r, in)
	if err != nil {
		return err
	}
	dir := r.Host("/kind/images")
	for _, img := range images {
		file := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
		digest, err := img.Write(file)
		if err != nil {
			return fmt.Errorf("%s: %w", img.Ref, err)
		}
		fmt.Printf("%s %s\n", img.Ref, digest)
	}
	return nil
}

// find returns the first dir/name or dir/cni/name that is a regular file.
func find(name string, dirs []string) (string, error) {
	for _, dir := range dirs {
		for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, "cni", name)} {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s is in none of %v", name, dirs)
}
