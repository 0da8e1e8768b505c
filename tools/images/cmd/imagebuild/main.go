// Command imagebuild builds the container images of the project and of its e2e as OCI image-layout tarballs,
// without Docker, a registry or a base image: each image is an empty image plus layers made from files (our
// binaries, the upstream binaries hack/build-e2e-tools.sh builds, files of Debian packages installed on this
// machine, and the shared libraries the ELF files among them need). The same inputs give the same digests:
// every file has mtime 0 and owner root, and entries are sorted.
//
// Usage: imagebuild -bin DIR -e2e-bin DIR -images deploy/kustomize/components/images/kustomization.yaml -out DIR [ref...]
//
// Each image becomes OUT/<ref with / and : as _>.tar (import with `ctr -n k8s.io images import`), listed with its
// digest in OUT/images.txt (the images of this run: all, or those named). A run of all removes the other
// tarballs in OUT, so that OUT holds exactly the set.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/image", "our static binaries: driver, fakecloud, registrar, livenessprobe, pause")
	flag.StringVar(&o.e2eBin, "e2e-bin", ".cache/e2e-bin", "the upstream binaries: CSI sidecars, snapshot-controller, agnhost")
	flag.StringVar(&o.component, "images", "deploy/kustomize/components/images/kustomization.yaml",
		"the kustomize component that pins the deployment's image tags")
	flag.StringVar(&o.out, "out", "_output/images", "output directory")
	flag.Parse()
	if err := run(o, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, e2eBin, component, out string
}

func run(o options, only []string) error {
	specs, err := imageSpecs(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var index, files []string
	for _, s := range specs {
		if len(only) > 0 && !slices.Contains(only, s.ref) {
			continue
		}
		file := filepath.Join(o.out, fileName(s.ref))
		digest, err := build(s, file)
		if err != nil {
			return fmt.Errorf("%s: %w", s.ref, err)
		}
		fmt.Printf("%s %s %s\n", s.ref, digest, file)
		index = append(index, fmt.Sprintf("%s %s %s", s.ref, digest, filepath.Base(file)))
		files = append(files, filepath.Base(file))
	}
	if len(only) == 0 {
		// The e2e nodes import every tarball here: one of an image no longer in the set (hello-populator after
		// make e2e-conformance, a renamed image) must not come along.
		if err := removeTarballsBut(o.out, files); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(o.out, "images.txt"), []byte(strings.Join(index, "\n")+"\n"), 0o644)
}

// removeTarballsBut removes the image tarballs in dir whose names are not in keep.
func removeTarballsBut(dir string, keep []string) error {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	for _, t := range tars {
		if !slices.Contains(keep, filepath.Base(t)) {
			if err := os.Remove(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileName is the tarball's name for ref.
func fileName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
}
