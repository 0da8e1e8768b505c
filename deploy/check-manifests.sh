#!/usr/bin/env bash
# Renders every kustomization under deploy/kustomize (base, then each overlay) into OUTDIR/<name>.yaml, and
# the Helm chart charts/diskforge with its default values, the kind-like and the provider-like values
# (charts/diskforge/ci/) into OUTDIR/helm-{default,kind,provider}.yaml, and checks what can be checked without
# a cluster: each renders, every image is pinned to a tag, every CSI socket is /csi/csi.sock, the kind
# renders point the driver at fakecloud and the provider renders at their configuration; the vendored snapshot
# CRDs are external-snapshotter's (the Go module cache's copy) in both places; helm lint --strict
# with each values file; test/e2e/helmchart (the chart gives the overlays' objects for the same settings);
# then the scripts (bash -n, shellcheck). The objects themselves are checked against a real API server by
# the e2e harness (server-side dry-run).
#
# Usage: deploy/check-manifests.sh [OUTDIR]   (default _output/manifests)
# Renders with `kubectl kustomize`, or with kustomize (installed with `go install` when kubectl is missing);
# KUSTOMIZE="kustomize build" or similar overrides. Helm is the pinned one of tools/helm, built into
# .cache/e2e-bin by hack/build-e2e-tools.sh (a no-op when up to date); HELM=/path/to/helm overrides.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${1:-_output/manifests}
kustomize_version=v5.8.2 # the newest that builds with Go 1.26
mkdir -p "$out"

if [[ -n ${KUSTOMIZE:-} ]]; then
	read -r -a render <<<"$KUSTOMIZE"
elif command -v kubectl >/dev/null; then
	render=(kubectl kustomize)
else
	if ! [[ -x .cache/bin/kustomize ]]; then
		echo "kubectl not found: installing kustomize $kustomize_version into .cache/bin"
		GOBIN="$PWD/.cache/bin" go install "sigs.k8s.io/kustomize/kustomize/$(cut -d. -f1 <<<"$kustomize_version")@$kustomize_version"
	fi
	render=(.cache/bin/kustomize build)
fi

fail=0
problem() {
	echo "  FAIL: $*" >&2
	fail=1
}

dirs=(deploy/kustomize/base)
for d in deploy/kustomize/overlays/*/; do
	dirs+=("${d%/}")
done

# check_render SOURCE NAME FILE checks one rendered file; NAME (kind, provider, default: the chart's default
# values, a cloud like provider's) selects the cloud checks.
# doc_of KIND NAME FILE prints the document of a rendered file with that kind and name.
doc_of() {
	awk -v kind="kind: $1" -v name="name: $2" '
		function flush() { if (index(buf, "\n" kind "\n") && buf ~ ("\n  " name "\n")) printf "%s", buf; buf = "\n" }
		BEGIN { buf = "\n" } /^---/ { flush(); next } { buf = buf $0 "\n" } END { flush() }' "$3"
}
# node_doc prints the node DaemonSet's document of a rendered file.
node_doc() { doc_of DaemonSet diskforge-node "$1"; }

# check_node_life checks what the node plugin's part in its Node's life needs (pkg/nodelife): the startup taint
# tolerated, the shutdown wait below the grace period, the registrar's preStop hook on the driver's /prestop,
# the RBAC of both, and the CSIDriver's period of attach limit updates.
check_node_life() {
	local dir=$1 file=$2 node=$3 grace wait port role
	grep -qE -- '^[[:space:]]*- operator: Exists$|key: disk\.csi\.diskforge\.io/agent-not-ready' <<<"$node" ||
		problem "$dir: the node DaemonSet does not tolerate the startup taint disk.csi.diskforge.io/agent-not-ready"
	grace=$(sed -n 's/^[[:space:]]*terminationGracePeriodSeconds:[[:space:]]*\([0-9]*\)$/\1/p' <<<"$node")
	wait=$(sed -n 's/^[[:space:]]*- --shutdown-wait=\([0-9]*\)s$/\1/p' <<<"$node")
	if [[ -z $grace || -z $wait ]] || ((wait >= grace)); then
		problem "$dir: the node plugin's --shutdown-wait (${wait:-unset}s) must be below terminationGracePeriodSeconds (${grace:-unset})"
	fi
	port=$(sed -n 's/^[[:space:]]*- --http-endpoint=0\.0\.0\.0:\([0-9]*\)$/\1/p' <<<"$node")
	grep -A1 -- 'path: /prestop' <<<"$node" | grep -qE "^[[:space:]]*port: ${port:-none}$" ||
		problem "$dir: no preStop hook on the driver's /prestop (port ${port:-unset}) to keep the registrar registered during the shutdown wait"
	# The rules as one line of words, the same from kustomize's block lists and the chart's flow lists.
	role=$(doc_of ClusterRole diskforge-node "$file" | sed -n '/^rules:/,$p' | sed 's/#.*//' | tr -s ' \n[]",-' ' ')
	for rule in 'nodes verbs: get list watch patch' 'csinodes verbs: get' 'volumeattachments verbs: list watch'; do
		grep -qE -- "resources: $rule( apiGroups:|[[:space:]]*$)" <<<"$role" ||
			problem "$dir: the node ClusterRole does not grant exactly $rule on ${rule%% *}"
	done
	doc_of CSIDriver disk.csi.diskforge.io "$file" | grep -qE '^  nodeAllocatableUpdatePeriodSeconds: 10$' ||
		problem "$dir: the CSIDriver does not set nodeAllocatableUpdatePeriodSeconds: 10"
}

check_render() {
	local dir=$1 name=$2 file=$3 objects image
	objects=$(grep -c '^kind:' "$file" || true)
	echo "$dir: $objects objects → $file"
	((objects > 0)) || problem "$dir renders no objects"

	# Every image pinned: a tag, not latest.
	while read -r image; do
		[[ $image =~ :[A-Za-z0-9._-]+$ && ! $image =~ :latest$ ]] || problem "$dir: image $image is not pinned to a tag"
	done < <(sed -n 's/^[[:space:]]*image:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$file" | sort -u)

	# The socket every CSI container talks over, as the e2e harness rewrites it.
	grep -qF -- '--endpoint=unix:///csi/csi.sock' "$file" || problem "$dir: no driver on unix:///csi/csi.sock"
	grep -F -- '--csi-address=' "$file" | grep -qvF -- '--csi-address=/csi/csi.sock' &&
		problem "$dir: a --csi-address other than /csi/csi.sock"

	# The node plugin never calls the cloud: no endpoint, region or credentials reach it.
	local node
	node=$(node_doc "$file")
	if grep -qE -- 'cloud-endpoint|--region|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|aws-credentials|diskforge-cloud' <<<"$node"; then
		problem "$dir: the node DaemonSet carries cloud settings or credentials"
	fi
	# shellcheck disable=SC2016 # $(NODE_NAME) is for the kubelet to expand.
	grep -qF -- '--node-name=$(NODE_NAME)' <<<"$node" || problem "$dir: the node plugin does not read its Node"
	check_node_life "$dir" "$file" "$node"

	case $name in
	kind)
		[[ $(grep -cF -- '--cloud-endpoint=http://fakecloud.diskforge-system.svc:8787' "$file") == 1 ]] ||
			problem "$dir: the controller (and only it) must point at fakecloud"
		grep -q '^  name: aws-credentials' "$file" || problem "$dir: no aws-credentials Secret"
		;;
	provider | default)
		# shellcheck disable=SC2016 # $(AWS_REGION) is for the kubelet to expand, not the shell.
		[[ $(grep -cE -- '^[[:space:]]*- --region=\$\(AWS_REGION\)$' "$file") == 1 ]] ||
			problem "$dir: the controller must take the region from diskforge-cloud"
		;;
	esac
}

for dir in "${dirs[@]}"; do
	name=$(basename "$dir")
	file=$out/$name.yaml
	if ! "${render[@]}" "$dir" >"$file"; then
		problem "$dir does not render"
		continue
	fi
	check_render "$dir" "$name" "$file"
done

# The snapshot CRDs: external-snapshotter's own, unchanged, of the release the snapshot-controller image is
# (compared with the Go module cache's copy when Go can fetch it), and the chart's crds/ the same files.
crd_dir=deploy/kustomize/overlays/kind/snapshot-controller/crds
snapshot_version=$(awk '$NF == "registry.k8s.io/sig-storage/snapshot-controller" { getline; print $NF; exit }' \
	deploy/kustomize/components/images/kustomization.yaml)
if command -v go >/dev/null && upstream=$(cd / && go mod download -json \
	"github.com/kubernetes-csi/external-snapshotter/client/v8@$snapshot_version" 2>/dev/null |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') && [[ -d $upstream/config/crd ]]; then
	for f in "$upstream"/config/crd/*_*.yaml; do
		cmp -s "$f" "$crd_dir/${f##*/}" || problem "$crd_dir/${f##*/} is not external-snapshotter $snapshot_version's"
	done
	echo "$crd_dir: external-snapshotter $snapshot_version's CRDs"
else
	echo "$crd_dir: external-snapshotter $snapshot_version not in reach, not compared"
fi
for f in "$crd_dir"/*_*.yaml; do
	cmp -s "$f" "charts/diskforge/crds/${f##*/}" || problem "charts/diskforge/crds/${f##*/} is not $f"
done
[[ $(find charts/diskforge/crds -name '*.yaml' | wc -l) == $(find "$crd_dir" -name '*_*.yaml' | wc -l) ]] ||
	problem "charts/diskforge/crds and $crd_dir hold different CRDs"

# The Helm chart, with the pinned helm.
chart=charts/diskforge
if [[ -n ${HELM:-} ]]; then
	helm=$HELM
else
	hack/build-e2e-tools.sh helm
	helm=$PWD/.cache/e2e-bin/helm
fi
# helm's own state (repositories, plugins, cache) stays out of $HOME.
export HELM_CACHE_HOME=$PWD/.cache/helm/cache HELM_CONFIG_HOME=$PWD/.cache/helm/config HELM_DATA_HOME=$PWD/.cache/helm/data
echo "$chart: $("$helm" version --short)"
for values in default kind provider; do
	args=()
	[[ $values == default ]] || args=(-f "$chart/ci/$values-values.yaml")
	file=$out/helm-$values.yaml
	if "$helm" lint --strict --quiet "$chart" "${args[@]}" --namespace diskforge-system >"$out/helm-$values.lint" 2>&1; then
		echo "$chart ($values values): helm lint --strict clean"
	else
		cat "$out/helm-$values.lint" >&2
		problem "$chart: helm lint with $values values"
	fi
	if ! "$helm" template diskforge "$chart" --namespace diskforge-system "${args[@]}" >"$file"; then
		problem "$chart does not render with $values values"
		continue
	fi
	check_render "$chart ($values values)" "$values" "$file"
done
if (cd test/e2e && HELM=$helm go test -count=1 ./helmchart/); then
	echo "$chart: same objects as deploy/kustomize/overlays/{kind,provider} (test/e2e/helmchart)"
else
	problem "$chart: test/e2e/helmchart"
fi

command -v shellcheck >/dev/null || problem "shellcheck not found (Debian package shellcheck)"
for script in test/e2e/kind/run.sh deploy/check-manifests.sh hack/build-e2e-tools.sh; do
	if bash -n "$script" && shellcheck "$script"; then
		echo "$script: bash -n and shellcheck clean"
	else
		problem "$script: bash -n or shellcheck"
	fi
done

if ((fail)); then
	echo "manifests: FAILED" >&2
	exit 1
fi
echo "manifests: ok"
