#!/usr/bin/env bash
# Builds the pinned binaries the e2e harness runs as local processes into
# .cache/e2e-bin/ (git-ignored), from the separate tools modules under tools/:
#
#   tools/kube      kube-apiserver kube-controller-manager kube-scheduler kubelet
#                   (k8s.io/kubernetes)
#   tools/etcd      etcd (go.etcd.io/etcd/server/v3)
#   tools/sidecars  csi-provisioner csi-attacher csi-resizer csi-snapshotter
#                   snapshot-controller, plus the snapshot CRDs in crds/
#   tools/helm      helm (helm.sh/helm/v3), for make manifests (charts/diskforge)
#   tools/containerd  containerd, containerd-shim-runc-v2, ctr (containerd v2)
#   tools/cni       the CNI plugins bridge, host-local, loopback in cni/
#   tools/kube      (module e2etest) e2e.test: Kubernetes' e2e with the external
#                   storage suites (tools/kube/e2e), and agnhost (test/images)
#   tools/populator hello-populator (github.com/kubernetes-csi/lib-volume-populator),
#                   only when named: make e2e-conformance asks for it
#
# Versions are pinned only in each module's go.mod/go.sum; the version strings
# stamped into the binaries are read from there. A module is rebuilt only when
# its stamp changes: sha256 over go.mod, go.sum, its own .go files, the build
# command line, `go version` and the relevant `go env`. Rebuilds reuse the Go
# build cache, so only the link step reruns after a flag-only change.
#
# Usage: hack/build-e2e-tools.sh [kube|etcd|sidecars|containerd|cni|e2etest|helm|populator ...]
#        (default: all but populator)
# Env:   E2E_BIN_DIR  output dir (default <repo>/.cache/e2e-bin)
#        E2E_FORCE=1  rebuild even if the stamp matches
#        E2E_NICE     nice level for the go commands (default 10)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${E2E_BIN_DIR:-${ROOT}/.cache/e2e-bin}
FORCE=${E2E_FORCE:-0}
NICE=(nice -n "${E2E_NICE:-10}")
DEFAULT_MODULES=(kube etcd sidecars containerd cni e2etest helm)
ALL_MODULES=("${DEFAULT_MODULES[@]}" populator)

log() { printf '[build-e2e-tools] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now prints seconds since the epoch with millisecond precision.
now() { date +%s.%3N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# mod_version <module dir> <module path> prints the version of <module path>
# selected in the module at <module dir>.
mod_version() {
  local v
  v=$(cd "$1" && go list -m -f '{{.Version}}' "$2") || die "cannot resolve $2 in $1"
  [[ -n ${v} ]] || die "$2 has no version in $1/go.mod"
  printf '%s\n' "${v}"
}

# Per-module build plan, filled in by plan_<module>:
#   DIR        module directory
#   BINS       binaries that must exist in ${OUT}
#   EXTRA      other files that must exist in ${OUT}
#   BUILD      go invocations (build, or test -c), one per element, arguments
#              separated by ASCII unit separators (\x1f) so flags may contain
#              spaces
#   POST       optional function run after a successful build
DIR='' POST=''
BINS=() EXTRA=() BUILD=()

US=$'\x1f'
join_args() { local IFS=${US}; printf '%s' "$*"; }

# kube_ldflags prints the variables hack/lib/version.sh sets in a k/k release
# build, so that --version and /version report the real release instead of
# v0.0.0-master+$Format:%H$.
kube_ldflags() {
  local v major minor ld='' pkg
  v=$(mod_version "${ROOT}/tools/kube" k8s.io/kubernetes)
  [[ ${v} =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "unexpected k8s.io/kubernetes version ${v}"
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
  done
  printf '%s\n' "${ld# }"
}

plan_kube() {
  DIR=${ROOT}/tools/kube
  local ld
  ld=$(kube_ldflags)
  BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
  BUILD=("$(join_args build -ldflags="${ld}" -o "${OUT}/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet)")
  EXTRA=() POST=''
}

plan_etcd() {
  DIR=${ROOT}/tools/etcd
  # etcd's version is a constant in go.etcd.io/etcd/api/v3/version; built
  # separately because "go build -o dir/" would name it after ".../server".
  BINS=(etcd)
  BUILD=("$(join_args build -o "${OUT}/etcd" go.etcd.io/etcd/server/v3)")
  EXTRA=() POST=''
}

plan_sidecars() {
  DIR=${ROOT}/tools/sidecars
  local -a args=(build)
  local mod cmd
  # Each sidecar reports main.version (set by its own release tooling from the
  # git tag); the per-package -ldflags patterns give each one its own tag.
  BINS=()
  for mod in \
    github.com/kubernetes-csi/external-provisioner/v6:csi-provisioner \
    github.com/kubernetes-csi/external-attacher/v4:csi-attacher \
    github.com/kubernetes-csi/external-resizer/v2:csi-resizer \
    github.com/kubernetes-csi/external-snapshotter/v8:csi-snapshotter \
    github.com/kubernetes-csi/external-snapshotter/v8:snapshot-controller; do
    cmd=${mod##*:} mod=${mod%:*}
    args+=("-ldflags=${mod}/cmd/${cmd}=-X main.version=$(mod_version "${DIR}" "${mod}")")
    BINS+=("${cmd}")
  done
  args+=(-o "${OUT}/")
  for cmd in "${BINS[@]}"; do
    case ${cmd} in
      csi-provisioner) args+=(github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner) ;;
      csi-attacher) args+=(github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher) ;;
      csi-resizer) args+=(github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer) ;;
      *) args+=("github.com/kubernetes-csi/external-snapshotter/v8/cmd/${cmd}") ;;
    esac
  done
  BUILD=("$(join_args "${args[@]}")")
  EXTRA=(crds/snapshot.storage.k8s.io_volumesnapshots.yaml crds/snapshot.storage.k8s.io_volumesnapshotcontents.yaml crds/snapshot.storage.k8s.io_volumesnapshotclasses.yaml)
  POST=copy_snapshot_crds
}

plan_helm() {
  DIR=${ROOT}/tools/helm
  local v k8s minor ld pkg
  v=$(mod_version "${DIR}" helm.sh/helm/v3)
  k8s=$(mod_version "${DIR}" k8s.io/client-go)
  [[ ${k8s} =~ ^v0\.([0-9]+)\. ]] || die "unexpected k8s.io/client-go version ${k8s}"
  minor=${BASH_REMATCH[1]}
  # What helm's own Makefile sets: its version, and the Kubernetes version of
  # its client-go (v0.X -> 1.X) for .Capabilities.KubeVersion in helm template
  # and the deprecated-API rules of helm lint (both 1.20 otherwise).
  ld="-X helm.sh/helm/v3/internal/version.version=${v}"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${minor}"
  done
  BINS=(helm)
  BUILD=("$(join_args build -ldflags="${ld}" -o "${OUT}/helm" helm.sh/helm/v3/cmd/helm)")
  EXTRA=() POST=''
}

plan_containerd() {
  DIR=${ROOT}/tools/containerd
  local v pkg=github.com/containerd/containerd/v2
  v=$(mod_version "${DIR}" "${pkg}")
  BINS=(containerd containerd-shim-runc-v2 ctr)
  BUILD=("$(join_args build -ldflags="-X ${pkg}/version.Version=${v}" -o "${OUT}/" \
    "${pkg}/cmd/containerd" "${pkg}/cmd/containerd-shim-runc-v2" "${pkg}/cmd/ctr")")
  EXTRA=() POST=''
}

plan_cni() {
  DIR=${ROOT}/tools/cni
  local p=github.com/containernetworking/plugins/plugins
  BINS=(cni/bridge cni/host-local cni/loopback)
  BUILD=("$(join_args build -o "${OUT}/cni/" "${p}/main/bridge" "${p}/ipam/host-local" "${p}/main/loopback")")
  EXTRA=() POST=''
}

# e2etest builds from tools/kube, with the same pins as the Kubernetes
# binaries: e2e.test (only the storage suites compiled in) and agnhost, the
# e2e suite's test image binary.
plan_e2etest() {
  DIR=${ROOT}/tools/kube
  local ld
  ld=$(kube_ldflags)
  BINS=(e2e.test agnhost)
  BUILD=("$(join_args test -c -ldflags="${ld}" -o "${OUT}/e2e.test" ./e2e)"
    "$(join_args build -o "${OUT}/agnhost" k8s.io/kubernetes/test/images/agnhost)")
  EXTRA=() POST=''
}

# populator builds the volume populator example that the storage suite's "any
# volume data source" spec deploys (as registry.k8s.io/sig-storage/hello-populator,
# which imagebuild names under the harness's sigStorageRegistry).
plan_populator() {
  DIR=${ROOT}/tools/populator
  local mod=github.com/kubernetes-csi/lib-volume-populator
  BINS=(hello-populator)
  BUILD=("$(join_args build -ldflags="-X main.version=$(mod_version "${DIR}" "${mod}")" \
    -o "${OUT}/hello-populator" "${mod}/example/hello-populator")")
  EXTRA=() POST=''
}

# copy_snapshot_crds copies the VolumeSnapshot and VolumeGroupSnapshot CRDs of
# the pinned external-snapshotter client module into ${OUT}/crds/.
copy_snapshot_crds() {
  local mod=github.com/kubernetes-csi/external-snapshotter/client/v8 src
  src=$(cd "${DIR}" && go mod download "${mod}" && go list -m -f '{{.Dir}}' "${mod}")/config/crd
  [[ -d ${src} ]] || die "snapshot CRDs not found in ${src}"
  rm -rf "${OUT}/crds"
  mkdir -p "${OUT}/crds"
  # kustomization.yaml is not a Kubernetes object; only the CRDs are copied.
  cp "${src}"/*.storage.k8s.io_*.yaml "${OUT}/crds/"
  chmod u+w "${OUT}"/crds/*.yaml
  printf '%s\n' "${src}" >"${OUT}/crds/SOURCE"
  log "sidecars: copied $(find "${OUT}/crds" -name '*.yaml' | wc -l) CRDs from ${src}"
}

# stamp prints the sha256 identifying the current plan's inputs.
stamp() {
  local b
  {
    printf 'module %s\n' "${DIR#"${ROOT}"/}"
    cat "${DIR}/go.mod" "${DIR}/go.sum"
    # The module's own sources (tools.go, e2e): sorted for stability.
    find "${DIR}" -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sed "s|${DIR}/||"
    for b in "${BUILD[@]}"; do printf 'go %s\n' "${b//${US}/ }"; done
    printf 'outputs %s\n' "${BINS[*]}" "${EXTRA[*]}"
    go version
    go env GOOS GOARCH GOAMD64 CGO_ENABLED GOEXPERIMENT GOFLAGS CC
  } | sha256sum | cut -d' ' -f1
}

build_module() {
  local name=$1 t0 want have b missing=0 step
  local -a args
  t0=$(now)
  "plan_${name}"
  [[ -f ${DIR}/go.mod ]] || die "${DIR}/go.mod not found"
  mkdir -p "${OUT}"

  want=$(stamp)
  have=$(cat "${OUT}/${name}.stamp" 2>/dev/null || true)
  for b in "${BINS[@]}" "${EXTRA[@]}"; do
    [[ -e ${OUT}/${b} ]] || missing=1
  done
  if [[ ${FORCE} != 1 && ${missing} == 0 && ${want} == "${have}" ]]; then
    log "${name}: up to date (${BINS[*]}) [$(elapsed "${t0}")]"
    return
  fi

  rm -f "${OUT}/${name}.stamp"
  log "${name}: downloading modules"
  step=$(now)
  (cd "${DIR}" && go mod download)
  log "${name}: modules ready [$(elapsed "${step}")]"
  for b in "${BUILD[@]}"; do
    IFS=${US} read -r -a args <<<"${b}"
    log "${name}: go ${args[*]}"
    step=$(now)
    (cd "${DIR}" && "${NICE[@]}" go "${args[0]}" -buildvcs=false "${args[@]:1}")
    log "${name}: built [$(elapsed "${step}")]"
  done
  if [[ -n ${POST} ]]; then "${POST}"; fi
  for b in "${BINS[@]}" "${EXTRA[@]}"; do
    [[ -e ${OUT}/${b} ]] || die "${name}: ${OUT}/${b} missing after build"
  done
  printf '%s\n' "${want}" >"${OUT}/${name}.stamp"
  log "${name}: done [$(elapsed "${t0}")]"
}

main() {
  local m t0
  local -a modules=("$@")
  command -v go >/dev/null || die "go not found in PATH"
  [[ ${#modules[@]} -gt 0 ]] || modules=("${DEFAULT_MODULES[@]}")
  for m in "${modules[@]}"; do
    [[ " ${ALL_MODULES[*]} " == *" ${m} "* ]] || die "unknown module ${m} (want one of: ${ALL_MODULES[*]})"
  done
  t0=$(now)
  for m in "${modules[@]}"; do
    build_module "${m}"
  done
  log "all done in $(elapsed "${t0}"); binaries in ${OUT}"
}

main "$@"
