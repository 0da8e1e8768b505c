#!/usr/bin/env bash
# Builds a kind node image without a registry (kind's own base image and `kind build node-image` pull from
# registries): a Debian root filesystem from debootstrap, turned into a node's by tools/kindnode (kind's files
# from the kind module, the units, the binaries, and the control plane's container images as OCI tarballs),
# imported into the container engine kind drives. See tools/kindnode/README.md.
#
# The parts:
#   .cache/e2e-bin (hack/build-e2e-tools.sh kube containerd cni)
#       kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, ctr, the runc shim, and the
#       CNI plugins bridge, host-local, loopback
#   .cache/kind-node/bin (this script, stamped as build-e2e-tools.sh stamps)
#       tools/kindnode/upstream/kube     kubeadm, kubectl, kube-proxy (the same k8s.io/kubernetes as tools/kube)
#       tools/kindnode/upstream/etcd     etcd 3.6.8, the version kubeadm v1.36.3 deploys
#       tools/kindnode/upstream/coredns  CoreDNS v1.14.2 with the plugins of kubeadm's Corefile
#       tools/kindnode                   kindnode (the assembler) and nodenet (the pod network)
#       tools/images/cmd/pause           the pod sandbox, as on the local e2e cluster
#   .cache/kind-node/rootfs              debootstrap of Debian 12 (minbase and the packages below), kept until
#                                        the package list changes
#
# The image is named diskforge.local/kind-node:<Kubernetes version>-<hash of every input>; an image of that
# name already in the engine is reused, older ones are removed. The name is printed as the last line.
#
# Usage: hack/build-kind-node-image.sh
# Env:   KIND_EXPERIMENTAL_PROVIDER  podman or docker (default docker): the engine that stores the image
#        DEBIAN_MIRROR               debootstrap's mirror (http://deb.debian.org/debian)
#        E2E_NICE                    nice level of the builds (10)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${ROOT}/.cache/kind-node
BIN=${CACHE}/bin
E2E_BIN=${E2E_BIN_DIR:-${ROOT}/.cache/e2e-bin}
ENGINE=${KIND_EXPERIMENTAL_PROVIDER:-docker}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
NICE=(nice -n "${E2E_NICE:-10}")
# What kind's base image installs that a node of this project uses: systemd as init, iproute2 and iptables for
# kind's entrypoint (it picks the iptables backend and rewrites DNS rules), ethtool and conntrack as kind has
# them, runc (containerd's runtime, as on the local cluster), mount tools, CA certificates.
PACKAGES=(systemd systemd-sysv iproute2 iptables conntrack ethtool kmod libseccomp2 runc ca-certificates procps
	util-linux mount bash)
KIND_MODULE=sigs.k8s.io/kind@v0.33.0

log() { printf '[kind-node] %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
now() { date +%s; }
T0=$(now)

case ${ENGINE} in
podman | docker) ;;
*) die "KIND_EXPERIMENTAL_PROVIDER=${ENGINE}: the node image is built for podman or docker" ;;
esac
[[ $(id -u) -eq 0 ]] || die "debootstrap and the node's files (owned by root) need root"
for tool in go debootstrap "${ENGINE}" tar sha256sum; do
	command -v "${tool}" >/dev/null || die "${tool} is needed (hack/deps.sh kind installs what is missing)"
done

# Anything debootstrap mounted in the root (it mounts /proc and /sys there while packages install) is unmounted
# on the way out, also after a failure or an interrupt, as is the half-assembled copy.
WORK=${CACHE}/work
cleanup() {
	local rc=$? m
	for m in $(findmnt -rn -o TARGET | grep -E "^${CACHE}/" | sort -r); do
		umount -l "${m}" || true
	done
	rm -rf "${WORK}" "${CACHE}/rootfs.new"
	exit "${rc}"
}
trap cleanup EXIT

# stamp prints a sha256 over the arguments' contents (files) or text (anything else).
stamp() {
	local a
	for a in "$@"; do
		if [[ -f ${a} ]]; then sha256sum "${a}" | cut -d' ' -f1; else printf '%s\n' "${a}"; fi
	done | sha256sum | cut -d' ' -f1
}

# build <name> <module dir> <outputs...> -- <go build arguments...>: go build in the module, again only when
# its stamp (go.mod, go.sum and .go files of the module and of those in REPLACED, the local module directories
# its go.mod replaces; the command, go version and env) changed or an output is missing.
build() {
	local name=$1 dir=$2 want have out d missing=0
	shift 2
	local -a outs=() srcs=() replaced=()
	while [[ $1 != -- ]]; do
		outs+=("$1")
		shift
	done
	shift
	read -ra replaced <<<"${REPLACED-}"
	for d in "${dir}" "${replaced[@]}"; do
		srcs+=("${d}/go.mod" "${d}/go.sum" \
			"$(find "${d}" -path "${d}/upstream" -prune -o -name '*.go' -type f -print0 | LC_ALL=C sort -z |
				xargs -0 sha256sum)")
	done
	want=$(stamp "${srcs[@]}" "$*" "$(go version)" "$(go env GOOS GOARCH CGO_ENABLED CC GOFLAGS)")
	have=$(cat "${BIN}/${name}.stamp" 2>/dev/null || true)
	for out in "${outs[@]}"; do [[ -x ${BIN}/${out} ]] || missing=1; done
	if [[ ${missing} == 0 && ${want} == "${have}" ]]; then
		log "${name}: up to date (${outs[*]})"
		return
	fi
	log "${name}: go build ${outs[*]}"
	local t=$SECONDS
	(cd "${dir}" && "${NICE[@]}" go build -buildvcs=false "$@")
	printf '%s\n' "${want}" >"${BIN}/${name}.stamp"
	log "${name}: built in $((SECONDS - t))s"
}

mkdir -p "${BIN}"

# --- binaries --------------------------------------------------------------------------------------------
"${ROOT}/hack/build-e2e-tools.sh" kube containerd cni
kube_dir=${ROOT}/tools/kindnode/upstream/kube
KUBE_VERSION=$(cd "${kube_dir}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
local_version=$(cd "${ROOT}/tools/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
[[ ${KUBE_VERSION} == "${local_version}" ]] ||
	die "tools/kindnode/upstream/kube pins k8s.io/kubernetes ${KUBE_VERSION}, tools/kube ${local_version}: kubeadm and the kubelet must match"
[[ ${KUBE_VERSION} =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "unexpected Kubernetes version ${KUBE_VERSION}"
# What k/k's release build stamps (hack/lib/version.sh), as build-e2e-tools.sh does for the kubelet: kubeadm
# reads its own version to pick the control plane's images.
ld=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	ld+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=${BASH_REMATCH[1]} -X ${pkg}.gitMinor=${BASH_REMATCH[2]}"
done
build kube "${kube_dir}" kubeadm kubectl kube-proxy -- -ldflags="${ld# }" -o "${BIN}/" \
	k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy
build etcd "${ROOT}/tools/kindnode/upstream/etcd" etcd -- -o "${BIN}/etcd" go.etcd.io/etcd/server/v3
build coredns "${ROOT}/tools/kindnode/upstream/coredns" coredns -- -o "${BIN}/coredns" .
# nodenet runs from an image of its own: static, as are kindnode and pause.
# kindnode builds with tools/images (its ociarchive package) through a replace directive.
CGO_ENABLED=0 REPLACED="${ROOT}/tools/images" build kindnode "${ROOT}/tools/kindnode" kindnode nodenet -- -o "${BIN}/" \
	./cmd/kindnode ./cmd/nodenet
CGO_ENABLED=0 build pause "${ROOT}/tools/images" pause -- -o "${BIN}/pause" ./cmd/pause

kind_files=$(go mod download -json "${KIND_MODULE}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/images/base/files
[[ -f ${kind_files}/usr/local/bin/entrypoint ]] || die "kind's base image files not found at ${kind_files}"

# --- the Debian root filesystem --------------------------------------------------------------------------
rootfs=${CACHE}/rootfs
rootfs_stamp=$(stamp "${SUITE}" "${MIRROR}" minbase "${PACKAGES[*]}")
if [[ $(cat "${CACHE}/rootfs.stamp" 2>/dev/null) != "${rootfs_stamp}" || ! -x ${rootfs}/usr/bin/systemctl ]]; then
	log "debootstrap ${SUITE} (${PACKAGES[*]}) from ${MIRROR}"
	t=$SECONDS
	rm -rf "${rootfs}" "${rootfs}.new" "${CACHE}/rootfs.stamp"
	"${NICE[@]}" debootstrap --variant=minbase --include="$(
		IFS=,
		echo "${PACKAGES[*]}"
	)" "${SUITE}" "${rootfs}.new" "${MIRROR}" >"${CACHE}/debootstrap.log" 2>&1 ||
		die "debootstrap failed; see ${CACHE}/debootstrap.log"
	# The package downloads and indexes are no part of a node.
	rm -rf "${rootfs}.new"/var/cache/apt/archives/*.deb "${rootfs}.new"/var/lib/apt/lists/*
	mv "${rootfs}.new" "${rootfs}"
	printf '%s\n' "${rootfs_stamp}" >"${CACHE}/rootfs.stamp"
	log "root filesystem ready in $((SECONDS - t))s"
fi

# --- the image -------------------------------------------------------------------------------------------
inputs=("${rootfs_stamp}" "${KIND_MODULE}" "${KUBE_VERSION}" "${ENGINE}")
for b in kubeadm kubectl kube-proxy etcd coredns kindnode nodenet pause; do inputs+=("${BIN}/${b}"); done
for b in kubelet kube-apiserver kube-controller-manager kube-scheduler containerd containerd-shim-runc-v2 ctr \
	cni/bridge cni/host-local cni/loopback; do
	inputs+=("${E2E_BIN}/${b}")
done
image=diskforge.local/kind-node:${KUBE_VERSION}-$(stamp "${inputs[@]}" | cut -c1-12)
if "${ENGINE}" image inspect "${image}" >/dev/null 2>&1; then
	log "${image} is up to date"
else
	log "assembling ${image}"
	rm -rf "${WORK}"
	cp -a "${rootfs}" "${WORK}"
	"${BIN}/kindnode" -root "${WORK}" -kind-files "${kind_files}" -kube-version "${KUBE_VERSION}" \
		-bin "${BIN},${E2E_BIN}" >&2
	changes=(--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'ENV container=docker')
	[[ ${ENGINE} == podman ]] && changes+=(--quiet)
	# systemd exits on SIGRTMIN+3 (on SIGTERM it would re-execute): podman stops nodes with it at once. Docker's
	# import takes no STOPSIGNAL, and kind removes Docker nodes with SIGKILL anyway.
	if [[ ${ENGINE} == podman ]]; then changes+=(--change 'STOPSIGNAL SIGRTMIN+3'); fi
	tar -C "${WORK}" --numeric-owner --xattrs --xattrs-include='*' -cf - . |
		"${ENGINE}" import "${changes[@]}" - "${image}" >/dev/null
	rm -rf "${WORK}"
	# Earlier node images are replaced by this one (one in use by a cluster stays: rmi refuses it).
	"${ENGINE}" images --format '{{.Repository}}:{{.Tag}}' | grep '^diskforge.local/kind-node:' |
		grep -vxF "${image}" | xargs -r "${ENGINE}" rmi >/dev/null 2>&1 || true
	log "${image} built"
fi
log "done in $(($(now) - T0))s"
echo "${image}"
