package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// imageSpec is one image: its files, the Debian packages whose files it holds, and how it starts.
type imageSpec struct {
	// ref is the image's full name, as containerd stores it (docker.io/... for short Docker Hub names).
	ref        string
	entrypoint []string
	// files are host files (usually binaries) placed at their path in the image: the image's own layer.
	files []hostFile
	// debs are Debian packages whose installed files (but documentation) go into the base layer.
	debs []string
	// busybox adds Debian's busybox-static as /usr/bin/busybox, with its applets as links where the image has no
	// file of that name.
	busybox bool
	// certs adds the machine's CA bundle (TLS to a real cloud endpoint, the API server).
	certs bool
}

type hostFile struct{ src, dst string }

// E2E image names: the e2e suite's own images are built here and named under e2eRegistry, which the suite
// is told about through KUBE_TEST_REPO_LIST (test/e2e/cluster writes it).
const (
	E2ERegistry        = "diskforge.local/e2e-test-images"
	PauseRegistry      = "diskforge.local"
	SigStorageRegistry = "diskforge.local/sig-storage"
)

// imageSpecs are every image the deployment (with the kind overlay) and the e2e run.
func imageSpecs(o options) ([]imageSpec, error) {
	tags, err := componentTags(o.component)
	if err != nil {
		return nil, err
	}
	ref := func(name string) (string, error) {
		t, ok := tags[name]
		if !ok {
			return "", fmt.Errorf("%s: no image %s", o.component, name)
		}
		return normalize(t), nil
	}
	bin := func(name string) string { return filepath.Join(o.bin, name) }
	e2e := func(name string) string { return filepath.Join(o.e2eBin, name) }
	var specs []imageSpec
	add := func(name string, s imageSpec) error {
		r, err := ref(name)
		if err != nil {
			return err
		}
		s.ref = r
		specs = append(specs, s)
		return nil
	}
	// The driver: node plugin and controller. The node formats, checks, grows and mounts filesystems with
	// Debian's tools (mount-utils runs mount, umount, blkid, fsck, mkfs.*; the driver e2fsck, resize2fs,
	// dumpe2fs, xfs_growfs, xfs_info; xfs_info and fsck.xfs are shell scripts).
	if err := add("diskforge/driver", imageSpec{
		entrypoint: []string{"/usr/local/bin/driver"},
		files:      []hostFile{{bin("driver"), "/usr/local/bin/driver"}},
		debs:       []string{"e2fsprogs", "xfsprogs", "util-linux", "mount"},
		busybox:    true, certs: true,
	}); err != nil {
		return nil, err
	}
	// fakecloud binds loop devices with ioctls; losetup and blockdev are there to look at them.
	if err := add("diskforge/fakecloud", imageSpec{
		entrypoint: []string{"/usr/local/bin/fakecloud"},
		files:      []hostFile{{bin("fakecloud"), "/usr/local/bin/fakecloud"}},
		debs:       []string{"util-linux", "mount"},
		busybox:    true,
	}); err != nil {
		return nil, err
	}
	for _, name := range []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "snapshot-controller"} {
		if err := add("registry.k8s.io/sig-storage/"+name, imageSpec{
			entrypoint: []string{"/" + name},
			files:      []hostFile{{e2e(name), "/" + name}},
			certs:      true,
		}); err != nil {
			return nil, err
		}
	}
	// Our registrar and livenessprobe, which take the upstream flags (the upstream ones are not served by the Go
	// module proxy); the e2e harness points the manifests at them with kustomize.
	specs = append(specs,
		imageSpec{ref: normalize("diskforge/csi-node-driver-registrar:dev"), entrypoint: []string{"/csi-node-driver-registrar"},
			files: []hostFile{{bin("registrar"), "/csi-node-driver-registrar"}}},
		imageSpec{ref: normalize("diskforge/livenessprobe:dev"), entrypoint: []string{"/livenessprobe"},
			files: []hostFile{{bin("livenessprobe"), "/livenessprobe"}}},
		// The pod sandbox (containerd's pinned sandbox image) and the e2e suite's pause.
		imageSpec{ref: PauseRegistry + "/pause:3.10.2", entrypoint: []string{"/pause"},
			files: []hostFile{{bin("pause"), "/pause"}}},
		// The e2e suite's busybox, and the image of the scenarios' application pods.
		imageSpec{ref: E2ERegistry + "/busybox:1.37.0-1", entrypoint: []string{"/bin/sh"}, busybox: true},
		// The storage suites' multiVolume pods write block devices with GNU dd (oflag=nocache, which BusyBox's
		// dd lacks): Debian's coreutils, under dash as /bin/sh (BusyBox's sh would run its own dd applet
		// whatever PATH says), busybox for the rest.
		imageSpec{ref: E2ERegistry + "/glibc-dns-testing:2.0.0", entrypoint: []string{"/bin/sh"},
			debs: []string{"dash", "coreutils"}, busybox: true},
		// agnhost from k8s.io/kubernetes' test/images, on busybox as upstream's image is on a shell base.
		imageSpec{ref: E2ERegistry + "/agnhost:2.63.0", entrypoint: []string{"/agnhost"},
			files: []hostFile{{e2e("agnhost"), "/agnhost"}}, busybox: true},
	)
	// The storage suite's populator spec deploys hello-populator (its manifest names v1.0.1; the Go module proxy
	// serves lib-volume-populator v1.2.0, whose example takes the same flags). Built only when make
	// e2e-conformance has built the binary: make e2e runs no spec that needs it.
	populator := e2e("hello-populator")
	if _, err := os.Stat(populator); err == nil {
		specs = append(specs, imageSpec{ref: SigStorageRegistry + "/hello-populator:v1.0.1",
			entrypoint: []string{"/hello-populator"}, files: []hostFile{{populator, "/hello-populator"}}})
	}
	return specs, nil
}

// componentTags reads the kustomize component's images: name → name:tag (or newName:newTag).
func componentTags(file string) (map[string]string, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var c struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out := map[string]string{}
	for _, i := range c.Images {
		n := i.Name
		if i.NewName != "" {
			n = i.NewName
		}
		if i.NewTag == "" {
			return nil, fmt.Errorf("%s: image %s has no newTag", file, i.Name)
		}
		out[i.Name] = n + ":" + i.NewTag
	}
	return out, nil
}

// normalize is the name containerd (and so the kubelet) gives an image reference: short Docker Hub names get
// docker.io/ (and library/).
func normalize(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}
