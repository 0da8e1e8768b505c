# diskforge: a cloud-disk CSI driver and fakecloud, the EC2-compatible cloud it is tested against.

# Go from PATH, else where Go's own tarball puts it: a fresh root shell lacks /usr/local/go/bin on PATH, and the
# recipes and scripts below (hack/deps.sh, the e2e tool builds) run go by name.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif
GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# The commit's date, not the clock's, so that a build is reproducible.
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VERSION_PKG := github.com/diskforge/diskforge/internal/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).buildDate=$(BUILD_DATE)
BENCH_RUNS ?= 3

.PHONY: all build demo test test-go test-race test-clients e2e e2e-conformance e2e-conformance-md e2e-disruptive e2e-tools bench lint deps clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The main job: fakecloud on loop devices plus the driver, one volume through its whole life over CSI.
demo:
	hack/deps.sh demo
	$(MAKE) build
	$(GO) run ./test/demo --bin $(BIN)

# Everything CI runs (.ci/run, with CI=true). Needs root, loop devices, e2fsprogs, xfsprogs and the AWS CLI (see
# `make deps`).
test:
	hack/deps.sh test
	$(MAKE) lint manifests test-go test-race test-clients e2e

test-go:
	$(GO) test -count=1 -timeout 30m ./...

# The packages whose code runs concurrently, under the race detector (cgo: gcc): ec2cloud's batcher, waits and
# device-name allocator, the driver's in-flight locks and gRPC servers, fakecloud's state, faults and API.
RACE_PKGS := ./pkg/cloud/ec2cloud/... ./pkg/driver/... ./pkg/fakecloud/... ./pkg/nodelife/...
test-race:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)

test-clients:
	bash test/clients/run.sh

# Real Kubernetes v1.36.3 on this host: the control plane as local processes, three kubelets on containerd v2 with
# Debian's runc, and the kind overlay applied as pods of the images make image builds; then the scenarios (S0-S8)
# and a focused subset of Kubernetes' external storage suite (e2e.test: 17 specs, two of them kubelet restarts over
# SSH; ciSpecs in test/e2e/scenarios/external_test.go, about 8 minutes: it fails unless exactly those specs ran and
# passed), then the node-life scenarios (TestNodeLife, L1-L6: startup taint, drain and shutdown, node loss, stuck
# attachment, attach limit, a node that joins after the install and goes; about 7 minutes). The binaries are built once into .cache/e2e-bin.
# E2E_EXTERNAL=false leaves the external suite out; make
# e2e-conformance runs all of it but the disruptive specs, make e2e-disruptive those. Each run of the suite keeps
# its report under _output/e2e-external, and each run of make e2e the cluster's logs (control plane, kubelets,
# containerd, every container: about 1.5 MB) under _output/e2e-logs.
E2E_EXTERNAL ?= true
e2e: image
	cd test/e2e && $(GO) vet -tags e2e ./... && $(GO) test -count=1 ./cluster/ ./external/... && \
		$(GO) test -tags e2e -count=1 -v -timeout 50m ./scenarios/ $(if $(filter true,$(E2E_EXTERNAL)),,-run '^(TestE2E|TestNodeLife)$$') \
			-args -external=$(E2E_EXTERNAL) -logs-dir=$(CURDIR)/_output/e2e-logs

# Kubernetes' external storage suite, all of it but its disruptive specs (which restart kubelets over SSH), on a
# fresh cluster; E2E_CONFORMANCE_TIMEOUT bounds the suite (ginkgo then interrupts it and reports what ran), and
# E2E_CONFORMANCE_FOCUS (a ginkgo regexp) narrows it. The images include hello-populator, for the populator spec.
# test/e2e/external/conformance.md is written from this run's report (ginkgo's JSON, kept with run.json under
# _output/e2e-external/conformance-<time>); make e2e-conformance-md writes it again from a saved run
# (E2E_RUN_DIR, default the newest), e.g. after editing test/e2e/external/notes.yaml.
E2E_CONFORMANCE_TIMEOUT ?= 3h
E2E_CONFORMANCE_FOCUS ?= .
e2e-conformance:
	hack/build-e2e-tools.sh populator
	$(MAKE) image
	cd test/e2e && $(GO) test -tags e2e -count=1 -v -timeout 4h ./scenarios/ -run TestExternalStorage \
		-args -external-focus='$(E2E_CONFORMANCE_FOCUS)' -external-skip='\[Disruptive\]' \
		-external-timeout=$(E2E_CONFORMANCE_TIMEOUT) -external-markdown=$(CURDIR)/test/e2e/external/conformance.md

# The external storage suite's [Disruptive] specs for our test patterns: kubelet stopped, started and restarted
# while volumes are in use, pods deleted meanwhile, mounts checked on the node. e2e.test reaches each node over SSH
# at <node address>:22, which the local cluster serves (test/e2e/cluster: nodecmd.go, ssh.go) with a key made for
# the run. The specs are serial, one after the other.
e2e-disruptive: image
	cd test/e2e && $(GO) test -tags e2e -count=1 -v -timeout 60m ./scenarios/ -run TestExternalStorage \
		-args -external-focus='\[Disruptive\]' -external-skip='\[Feature:Windows\]'

E2E_RUN_DIR ?= $(lastword $(sort $(wildcard _output/e2e-external/conformance-*)))
e2e-conformance-md:
	@test -n "$(E2E_RUN_DIR)" || { echo "no saved run: make e2e-conformance first, or set E2E_RUN_DIR"; exit 1; }
	cd test/e2e && $(GO) run ./external/conformance-md -run-dir $(abspath $(E2E_RUN_DIR)) \
		-notes external/notes.yaml -o $(CURDIR)/test/e2e/external/conformance.md \
		-regenerate 'make e2e-conformance-md E2E_RUN_DIR=$(E2E_RUN_DIR)'

e2e-tools:
	hack/build-e2e-tools.sh

# test/bench drives the driver and fakecloud binaries through CSI: 100 parallel create → publish → unpublish →
# delete cycles with instant and 1 s transitions (JSON per run), the same called as the sidecars do with and
# without 30 % of EC2 calls refused, 1,000 cycles on 50 instances under EC2's request limits (about 20 min),
# 200 under them with the driver's model 5 times too large and with the driver killed twice mid-burst,
# expand and modify at once, and NodeStageVolume against the same mkfs + mount by hand (root); fakecloud's FUSE
# backend against its loop devices (root).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 200x ./pkg/fakecloud/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/cloud/...
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/fakecloud/loadbench/
	$(GO) test -run '^$$' -bench 'BackendIO|FuseIsolation' -benchtime 1x ./pkg/fakecloud/blockdev/
	$(GO) run ./test/bench controller --bin $(BIN) --runs $(BENCH_RUNS)
	$(GO) run ./test/bench controller --bin $(BIN) --sidecar --profiles instant,1s --start cold --runs $(BENCH_RUNS) \
		--fakecloud-args ';--fault-error=*=0.3:RequestLimitExceeded:before'
	$(GO) run ./test/bench controller --bin $(BIN) --rate-limits ec2 --sidecar --cycles 1000 --nodes 50 \
		--profiles instant,1s --start cold --runs $(BENCH_RUNS)
	@# A pacer whose model is 5 times the account's buckets (another client spends them): it learns them.
	$(GO) run ./test/bench controller --bin $(BIN) --rate-limits ec2 --sidecar --cycles 200 --nodes 50 \
		--profiles instant --start cold --runs $(BENCH_RUNS) \
		--driver-args '--ec2-request-limits=CreateVolume=25/500,DeleteVolume=25/500,*=25/250,Describe*=100/500'
	@# The driver killed (SIGKILL) twice during a paced burst: nothing leaked or duplicated.
	$(GO) run ./test/bench controller --bin $(BIN) --rate-limits ec2 --sidecar --cycles 200 --nodes 50 \
		--profiles instant --start cold --runs $(BENCH_RUNS) --kill-driver-at 10s,30s
	$(GO) run ./test/bench modify --bin $(BIN)
	$(GO) run ./test/bench node --bin $(BIN)
	@# fuse against loop through CSI: NodeStage, a pod's I/O, CPU per GiB, RSS with 100 volumes under I/O (root).
	$(GO) run ./test/bench fuse --bin $(BIN) --runs $(BENCH_RUNS)

lint:
	@out=$$(gofmt -l cmd pkg internal test hack tools); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# An environment skip goes through testutil.SkipUnless, which fails under CI instead of skipping silently.
	@out=$$(grep -rnE '\b(t|b|tb)\.Skip(f|Now)?\(' --include='*.go' cmd pkg internal test/sanity test/demo | grep -v '^internal/testutil/'); \
		if [ -n "$$out" ]; then echo "skip without testutil.SkipUnless:"; echo "$$out"; exit 1; fi
	shellcheck hack/*.sh test/clients/*.sh test/e2e/kind/*.sh deploy/*.sh .ci/run
	cd tools/images && $(GO) vet ./...

# What a fresh Debian machine lacks for the tests (run as root); `make test` runs it itself.
deps:
	hack/deps.sh test

clean:
	rm -rf $(BIN)

# Container images without Docker (tools/images, go-containerregistry): the driver, fakecloud, the CSI sidecars
# built from their modules, our registrar and liveness probe, and the e2e's pause, busybox and agnhost, as OCI
# image-layout tarballs in _output/images (ctr -n k8s.io images import), reproducibly; then a test that each image
# holds what its entrypoint needs. `make image-docker` builds the driver and fakecloud from the Dockerfiles.
IMAGE_BIN := $(CURDIR)/_output/image-bin
IMAGES    := $(CURDIR)/_output/images
DOCKER     ?= docker
IMAGE_REPO ?= diskforge
IMAGE_TAG  ?= dev

.PHONY: image image-docker manifests

image: e2e-tools
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(IMAGE_BIN)/ ./cmd/driver ./cmd/fakecloud
	cd tools/images && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_BIN)/ ./cmd/registrar ./cmd/livenessprobe ./cmd/pause ./cmd/imagebuild
	$(IMAGE_BIN)/imagebuild -bin $(IMAGE_BIN) -e2e-bin $(CURDIR)/.cache/e2e-bin -out $(IMAGES)
	cd tools/images && IMAGES_DIR=$(IMAGES) $(GO) test -count=1 ./...

image-docker:
	$(DOCKER) build -f Dockerfile.driver --build-arg VERSION=$(VERSION) -t $(IMAGE_REPO)/driver:$(IMAGE_TAG) .
	$(DOCKER) build -f Dockerfile.fakecloud -t $(IMAGE_REPO)/fakecloud:$(IMAGE_TAG) .

# Renders deploy/kustomize (base and every overlay) and the Helm chart (default, kind and provider values: helm-*.yaml)
# into _output/manifests and checks them offline: helm lint, test/e2e/helmchart (chart and overlays give the same
# objects), bash -n and shellcheck of the scripts. Helm is built from tools/helm into .cache/e2e-bin on first use.
manifests:
	bash deploy/check-manifests.sh _output/manifests

# kind + fakecloud (test/e2e/kind/run.sh): a kind cluster of test/e2e/kind/kind-config.yaml's layout (a control
# plane running fakecloud, three workers in two zones), the driver's images loaded, the kind overlay applied,
# the scenarios S0-S8 against it, and the cluster deleted at the end (also on failure) with the machine put
# back. With Docker: kind's own node image, `make image-docker`. Without (podman, KIND_EXPERIMENTAL_PROVIDER):
# the node image is built offline (hack/build-kind-node-image.sh, make kind-node-image) and every image comes
# from `make image`. E2E_KIND_ARGS go to run.sh (--keep, --skip-build, --no-test).
.PHONY: e2e-kind e2e-kind-single kind-load kind-node-image
E2E_KIND_ARGS ?=
e2e-kind:
	hack/deps.sh kind
	test/e2e/kind/run.sh $(E2E_KIND_ARGS)

# Builds the images and loads them into the kind cluster KIND_CLUSTER (hack/kind-load.sh: Docker's
# `make image-docker`, or, with podman, every image of `make image`); then
#   helm install diskforge charts/diskforge -n diskforge-system --create-namespace --set fakecloud.enabled=true
#   helm test diskforge -n diskforge-system
KIND_CLUSTER ?= kind
kind-load:
	KIND_CLUSTER=$(KIND_CLUSTER) hack/kind-load.sh

# The one-node proof (test/e2e/kind/run.sh --single): kind's default cluster (only the cgroup v1 kubelet patch),
# make kind-load, helm install with fakecloud.enabled=true, helm test; the cluster deleted at the end.
e2e-kind-single:
	hack/deps.sh kind
	test/e2e/kind/run.sh --single $(E2E_KIND_ARGS)

kind-node-image:
	KIND_EXPERIMENTAL_PROVIDER=$${KIND_EXPERIMENTAL_PROVIDER:-podman} hack/build-kind-node-image.sh
