package ec2model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// EnvModel names a service model file to use instead of searching for one.
const EnvModel = "DISKFORGE_EC2_MODEL"

// modelFile is where botocore keeps EC2's model of API version 2016-11-15, below a botocore package directory.
const modelFile = "data/ec2/2016-11-15/service-2.json"

// botocoreDirs are where botocore packages are installed: Debian's python3-botocore, the botocore Debian's
// awscli package carries inside it (hack/deps.sh installs awscli), pip's, and pyenv's or pip's --user below the
// home directory.
func botocoreDirs() []string {
	dirs := []string{
		"/usr/lib/python3/dist-packages/botocore",
		"/usr/lib/python3/dist-packages/awscli/botocore",
		"/usr/local/lib/python3*/dist-packages/botocore",
		"/usr/local/lib/python3*/site-packages/botocore",
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".pyenv/versions/*/lib/python3*/site-packages/botocore"),
			filepath.Join(home, ".local/lib/python3*/site-packages/botocore"))
	}
	return dirs
}

// Found is one installed model.
type Found struct {
	Model *Model
	// Package is who ships it and at which version ("botocore 1.43.11", "awscli 2.9.19").
	Package string
}

// Locate finds the installed EC2 models and returns the newest, and every one found. EC2's API version
// 2016-11-15 only ever gains operations, so the newest is the one with the most. EnvModel, when set, is the only
// one considered.
func Locate() (Found, []Found, error) {
	var paths []string
	if p := os.Getenv(EnvModel); p != "" {
		paths = []string{p}
	} else {
		for _, dir := range botocoreDirs() {
			for _, ext := range []string{"", ".gz"} {
				matches, _ := filepath.Glob(filepath.Join(dir, modelFile+ext))
				paths = append(paths, matches...)
			}
		}
	}
	var all []Found
	var errs []error
	for _, p := range paths {
		m, err := Load(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, Found{Model: m, Package: packageOf(p)})
	}
	if len(all) == 0 {
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("no %s below %s (install awscli or python3-botocore, or set %s)", modelFile,
				strings.Join(botocoreDirs(), ", "), EnvModel))
		}
		return Found{}, nil, errors.Join(errs...)
	}
	newest := all[0]
	for _, f := range all[1:] {
		if len(f.Model.operations) > len(newest.Model.operations) {
			newest = f
		}
	}
	return newest, all, errors.Join(errs...)
}

var versionLine = regexp.MustCompile(`(?m)^__version__ = ['"]([^'"]+)['"]`)

// packageOf names the Python package a model file belongs to, with its version: botocore's own, or awscli's
// when botocore is vendored inside it (its botocore says only "2.0.0dev…").
func packageOf(path string) string {
	dir := filepath.Dir(path)
	for range 3 {
		dir = filepath.Dir(dir) // up from data/ec2/2016-11-15/service-2.json to the botocore directory
	}
	pkg := dir
	if filepath.Base(filepath.Dir(dir)) == "awscli" {
		pkg = filepath.Dir(dir)
	}
	name := filepath.Base(pkg)
	src, err := os.ReadFile(filepath.Join(pkg, "__init__.py"))
	if m := versionLine.FindSubmatch(src); err == nil && m != nil {
		return name + " " + string(m[1])
	}
	return name + " (version unknown) at " + pkg
}
