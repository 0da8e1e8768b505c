#!/usr/bin/env bash
# The e2e scenarios on kind: creates a cluster of three workers in two zones (kind-config.yaml), builds the
# driver and fakecloud images and loads them into it, applies the snapshot CRDs and the kind overlay
# (fakecloud inside the cluster), registers every node with fakecloud as an instance of its zone, waits for
# the driver, then runs the scenarios of test/e2e (test/e2e/scenarios) against the cluster's kubeconfig,
# with fakecloud reached through a port-forward for their cloud-side checks.
#
# Needs a Docker engine, Go, kubectl and curl; kind is installed with `go install` when it is missing.
#
# Usage: test/e2e/kind/run.sh [--keep] [--skip-build] [--no-test]
#   --keep        leave the cluster running at the end (by default it is deleted, also after a failure,
#                 once its logs are saved under .cache/kind/logs)
#   --skip-build  use the diskforge/driver:dev and diskforge/fakecloud:dev images already in Docker
#   --no-test     set the cluster up and stop there (implies --keep)
# Environment:
#   KIND_CLUSTER_NAME  cluster name (diskforge)
#   KIND_NODE_IMAGE    node image (kind's default for its version)
#   KIND_VERSION       kind to install when none is on PATH (v0.33.0)
#   FAKECLOUD_PORT     local port of the port-forward to fakecloud (18787)
#   E2E_TIMEOUT        go test -timeout (60m)
#   E2E_ARGS           more arguments for the scenarios' test binary (e.g. -test.run=TestE2E/S6)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"

cluster=${KIND_CLUSTER_NAME:-diskforge}
kind_version=${KIND_VERSION:-v0.33.0}
port=${FAKECLOUD_PORT:-18787}
ns=diskforge-system
overlay=deploy/kustomize/overlays/kind
images_file=deploy/kustomize/components/images/kustomization.yaml
config=test/e2e/kind/kind-config.yaml
work=$root/.cache/kind
kubeconfig=$work/kubeconfig
driver_image=diskforge/driver:dev
fakecloud_image=diskforge/fakecloud:dev

keep=false
build=true
run_tests=true
for arg in "$@"; do
	case $arg in
	--keep) keep=true ;;
	--skip-build) build=false ;;
	--no-test)
		run_tests=false
		keep=true
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "unknown argument: $arg (see --help)" >&2
		exit 2
		;;
	esac
done

log() { printf '\n=== %s\n' "$*"; }
die() {
	echo "error: $*" >&2
	exit 1
}

# --- tools -------------------------------------------------------------------------------------------------
for tool in docker go kubectl curl; do
	command -v "$tool" >/dev/null || die "$tool is needed"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed); kind needs one"
mkdir -p "$work/bin"
export PATH="$work/bin:$PATH"
if ! command -v kind >/dev/null; then
	log "installing kind $kind_version into $work/bin"
	GOBIN="$work/bin" go install "sigs.k8s.io/kind@$kind_version"
fi

# The snapshot CRDs come from the same external-snapshotter release as the snapshot-controller image.
snapshot_version=$(awk '$NF == "registry.k8s.io/sig-storage/snapshot-controller" { getline; print $NF; exit }' "$images_file")
[[ $snapshot_version == v* ]] || die "no snapshot-controller tag found in $images_file"

# --- teardown ----------------------------------------------------------------------------------------------
pf_pid=
cleanup() {
	local rc=$?
	if [[ -n $pf_pid ]]; then
		kill "$pf_pid" 2>/dev/null || true
		wait "$pf_pid" 2>/dev/null || true
	fi
	if ((rc != 0)) && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
		echo "failed (exit $rc); cluster state:" >&2
		kubectl get nodes,pods -A -o wide >&2 || true
		rm -rf "$work/logs"
		kind export logs "$work/logs" --name "$cluster" >/dev/null 2>&1 &&
			echo "logs of every node and pod: $work/logs" >&2
	fi
	if [[ $keep == true ]]; then
		echo "cluster $cluster kept: export KUBECONFIG=$kubeconfig; delete it with: kind delete cluster --name $cluster"
	elif kind get clusters 2>/dev/null | grep -qx "$cluster"; then
		log "deleting cluster $cluster"
		kind delete cluster --name "$cluster" || true
	fi
	exit "$rc"
}
trap cleanup EXIT

# --- 1. cluster --------------------------------------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	log "reusing cluster $cluster"
	kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig"
else
	log "creating cluster $cluster ($config)"
	node_image=()
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		node_image=(--image "$KIND_NODE_IMAGE")
	fi
	kind create cluster --name "$cluster" --config "$config" --kubeconfig "$kubeconfig" --wait 5m \
		${node_image[@]+"${node_image[@]}"}
fi
export KUBECONFIG=$kubeconfig

# Nodes without an instance ID (a kind config of your own) get one, and a zone when they have none: the
# node plugin needs both, and fakecloud must know the instance.
n=0
for node in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
	n=$((n + 1))
	if [[ -z $(kubectl get "$node" -o jsonpath='{.metadata.labels.node\.diskforge\.io/instance-id}') ]]; then
		kubectl label "$node" "node.diskforge.io/instance-id=i-$(printf '%017x' $((0x100 + n)))"
	fi
	if [[ -z $(kubectl get "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}') ]]; then
		kubectl label "$node" topology.kubernetes.io/zone=us-east-1a
	fi
done
((n > 0)) || die "the cluster has no worker nodes"

# --- 2. images ---------------------------------------------------------------------------------------------
if [[ $build == true ]]; then
	log "building $driver_image and $fakecloud_image"
	make image-docker IMAGE_REPO=diskforge IMAGE_TAG=dev
fi
log "loading the images into $cluster"
kind load docker-image --name "$cluster" "$driver_image" "$fakecloud_image"

# --- 3. snapshot CRDs (from the Go module cache; see README "kind") ----------------------------------------
log "snapshot CRDs of external-snapshotter $snapshot_version"
crd_dir=$(cd / && go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@$snapshot_version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/config/crd
[[ -f $crd_dir/kustomization.yaml ]] || die "no CRDs at $crd_dir"
kubectl apply --server-side -k "$crd_dir"
kubectl wait --for=condition=Established --timeout=60s \
	crd/volumesnapshotclasses.snapshot.storage.k8s.io \
	crd/volumesnapshotcontents.snapshot.storage.k8s.io \
	crd/volumesnapshots.snapshot.storage.k8s.io

# --- 4. fakecloud first, then its instances ----------------------------------------------------------------
manifests=$work/kind.yaml
kubectl kustomize "$overlay" >"$manifests"
log "fakecloud"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f "$manifests" -l app.kubernetes.io/component=fakecloud
kubectl -n "$ns" rollout status deployment/fakecloud --timeout=3m

log "registering the nodes with fakecloud"
kubectl -n "$ns" port-forward service/fakecloud "$port:8787" >"$work/port-forward.log" 2>&1 &
pf_pid=$!
for _ in $(seq 1 30); do
	curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	sleep 1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || die "fakecloud unreachable through the port-forward ($work/port-forward.log)"
# /admin takes the bearer token from the credentials Secret (its name carries kustomize's hash).
secret=$(kubectl -n "$ns" get secrets -o name | grep -m1 '^secret/aws-credentials') || die "no aws-credentials Secret in $ns"
admin_token=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.admin_token}' | base64 -d)
# The scenarios' cloud checks sign EC2 requests with the driver's key and read /admin with the token.
CLOUD_ACCESS_KEY_ID=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.key_id}' | base64 -d)
CLOUD_SECRET_ACCESS_KEY=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.access_key}' | base64 -d)
CLOUD_ADMIN_TOKEN=$admin_token
export CLOUD_ACCESS_KEY_ID CLOUD_SECRET_ACCESS_KEY CLOUD_ADMIN_TOKEN
while read -r node id zone; do
	echo "$node: $id in $zone"
	curl -fsS -X PUT -H 'Content-Type: application/json' -H "Authorization: Bearer $admin_token" \
		-d "{\"zone\":\"$zone\"}" "http://127.0.0.1:$port/admin/instances/$id" >/dev/null
done < <(kubectl get nodes -l node.diskforge.io/instance-id -o \
	jsonpath='{range .items[*]}{.metadata.name} {.metadata.labels.node\.diskforge\.io/instance-id} {.metadata.labels.topology\.kubernetes\.io/zone}{"\n"}{end}')

# --- 5. the driver -----------------------------------------------------------------------------------------
log "the driver ($overlay)"
kubectl apply -f "$manifests"
kubectl -n kube-system rollout status deployment/snapshot-controller --timeout=5m
kubectl -n "$ns" rollout status deployment/diskforge-controller --timeout=5m
kubectl -n "$ns" rollout status daemonset/diskforge-node --timeout=5m

# The kubelet registers the plugin on each node: its CSINode lists the driver with the zone keys.
want=$(kubectl get nodes -l node.diskforge.io/instance-id -o name | wc -l)
for _ in $(seq 1 60); do
	have=$(kubectl get csinodes -o jsonpath='{range .items[*]}{.spec.drivers[*].name}{"\n"}{end}' |
		grep -cx disk.csi.diskforge.io || true)
	((have >= want)) && break
	sleep 2
done
((have >= want)) || die "the driver is registered on $have of $want nodes"
kubectl get csinodes -o custom-columns='NODE:.metadata.name,DRIVERS:.spec.drivers[*].name,NODE-ID:.spec.drivers[*].nodeID'

# --- 6. the e2e scenarios ----------------------------------------------------------------------------------
if [[ $run_tests == false ]]; then
	log "ready: export KUBECONFIG=$kubeconfig"
	exit 0
fi
# test/e2e is a module of its own; the scenarios take the cluster's kubeconfig, and fakecloud (through the
# port-forward, kept open until the end) for their cloud-side checks. No host checks: the kubelets run in
# kind's containers, not on this machine.
extra=()
read -r -a extra <<<"${E2E_ARGS:-}"
log "e2e scenarios against $kubeconfig"
(cd test/e2e && go test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-60m}" ./scenarios/ \
	-args -kubeconfig="$kubeconfig" -cloud-url="http://127.0.0.1:$port" ${extra[@]+"${extra[@]}"})
