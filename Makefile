# diskforge: a cloud-disk CSI driver and fakecloud, the EC2-compatible cloud it is tested against.

GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# The commit's date, not the clock's, so that a build is reproducible.
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VERSION_PKG := github.com/diskforge/diskforge/internal/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).buildDate=$(BUILD_DATE)
BENCH_RUNS ?= 3

.PHONY: all build demo test test-go test-clients e2e e2e-tools bench lint deps clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The main job: fakecloud on loop devices plus the driver, one volume through its whole life over CSI.
demo:
	hack/deps.sh demo
	$(MAKE) build
	$(GO) run ./test/demo --bin $(BIN)

# Everything CI runs. Needs root, loop devices, e2fsprogs, xfsprogs and the AWS CLI (see `make deps`).
test:
	hack/deps.sh test
	$(MAKE) lint manifests test-go test-clients e2e

test-go:
	$(GO) test -count=1 -timeout 30m ./...

test-clients:
	bash test/clients/run.sh

# Real Kubernetes (v1.36.3 apiserver, controller manager, scheduler, three kubelets on a fake runtime, the CSI
# sidecars) as local processes driving the driver; the binaries are built once into .cache/e2e-bin.
e2e: build e2e-tools
	cd test/e2e && $(GO) vet -tags e2e ./... && $(GO) test -tags e2e -count=1 -v -timeout 40m ./scenarios/

e2e-tools:
	hack/build-e2e-tools.sh

# test/bench drives the driver and fakecloud binaries through CSI: 100 parallel create → publish → unpublish →
# delete cycles with instant and 1 s transitions (JSON per run), expand and modify at once, and NodeStageVolume
# against the same mkfs + mount by hand (root).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 200x ./pkg/fakecloud/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/cloud/...
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/fakecloud/loadbench/
	$(GO) run ./test/bench controller --bin $(BIN) --runs $(BENCH_RUNS)
	$(GO) run ./test/bench modify --bin $(BIN)
	$(GO) run ./test/bench node --bin $(BIN)

lint:
	@out=$$(gofmt -l cmd pkg internal test hack tools); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# An environment skip goes through testutil.SkipUnless, which fails under CI instead of skipping silently.
	@out=$$(grep -rnE '\b(t|b|tb)\.Skip(f|Now)?\(' --include='*.go' cmd pkg internal test/sanity test/demo | grep -v '^internal/testutil/'); \
		if [ -n "$$out" ]; then echo "skip without testutil.SkipUnless:"; echo "$$out"; exit 1; fi
	shellcheck hack/*.sh test/clients/*.sh test/e2e/kind/*.sh deploy/*.sh .ci/run

# What a fresh Debian machine lacks for the tests (run as root); `make test` runs it itself.
deps:
	hack/deps.sh test

clean:
	rm -rf $(BIN)

# Container images of the driver and fakecloud (needs a Docker engine). The deploy manifests and the kind
# script use diskforge/driver:dev and diskforge/fakecloud:dev; push elsewhere with IMAGE_REPO/IMAGE_TAG.
DOCKER     ?= docker
IMAGE_REPO ?= diskforge
IMAGE_TAG  ?= dev

.PHONY: image manifests

image:
	$(DOCKER) build -f Dockerfile.driver --build-arg VERSION=$(VERSION) -t $(IMAGE_REPO)/driver:$(IMAGE_TAG) .
	$(DOCKER) build -f Dockerfile.fakecloud -t $(IMAGE_REPO)/fakecloud:$(IMAGE_TAG) .

# Renders deploy/kustomize (base and every overlay) and the Helm chart (default, kind and provider values: helm-*.yaml)
# into _output/manifests and checks them offline: helm lint, test/e2e/helmchart (chart and overlays give the same
# objects), bash -n and shellcheck of the scripts. Helm is built from tools/helm into .cache/e2e-bin on first use.
manifests:
	bash deploy/check-manifests.sh _output/manifests
