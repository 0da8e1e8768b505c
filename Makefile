# diskforge: a cloud-disk CSI driver and fakecloud, the EC2-compatible cloud it is tested against.

GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build demo test test-go test-clients e2e e2e-conformance e2e-tools bench lint deps clean

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

# Real Kubernetes v1.36.3 on this host: the control plane as local processes, three kubelets on containerd v2 with
# Debian's runc, and the kind overlay applied as pods of the images make image builds; then the seven scenarios
# and a focused subset of Kubernetes' external storage suite (e2e.test). The binaries are built once into
# .cache/e2e-bin. The external suite is off in make e2e until its CI subset has passed here (E2E_EXTERNAL=true
# turns it on); make e2e-conformance runs it.
E2E_EXTERNAL ?= false
e2e: image
	cd test/e2e && $(GO) vet -tags e2e ./... && $(GO) test -count=1 ./cluster/ && \
		$(GO) test -tags e2e -count=1 -v -timeout 50m ./scenarios/ -args -external=$(E2E_EXTERNAL)

# Kubernetes' external storage suite (but its disruptive specs), on a fresh cluster.
e2e-conformance: image
	cd test/e2e && $(GO) test -tags e2e -count=1 -v -timeout 4h ./scenarios/ -run TestExternalStorage -args -external-focus=.

e2e-tools:
	hack/build-e2e-tools.sh

bench:
	$(GO) test -run '^$$' -bench . -benchtime 200x ./pkg/fakecloud/
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/cloud/...

lint:
	@out=$$(gofmt -l cmd pkg internal test hack tools); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
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

# Renders deploy/kustomize (base and every overlay) into _output/manifests and checks it offline; bash -n and
# shellcheck of the kind script (test/e2e/kind/run.sh).
manifests:
	bash deploy/check-manifests.sh _output/manifests
