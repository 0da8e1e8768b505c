#!/usr/bin/env bash
# Renders every kustomization under deploy/kustomize (base, then each overlay) into OUTDIR/<name>.yaml and
# checks what can be checked without a cluster: each renders, every image is pinned to a tag, every CSI
# socket is /csi/csi.sock, the kind overlay points the driver at fakecloud and the provider overlay at its
# configuration; then the kind script (bash -n, shellcheck). The objects themselves are checked against a
# real API server by the e2e harness (server-side dry-run).
#
# Usage: deploy/check-manifests.sh [OUTDIR]   (default _output/manifests)
# Renders with `kubectl kustomize`, or with kustomize (installed with `go install` when kubectl is missing);
# KUSTOMIZE="kustomize build" or similar overrides.
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

for dir in "${dirs[@]}"; do
	name=$(basename "$dir")
	file=$out/$name.yaml
	if ! "${render[@]}" "$dir" >"$file"; then
		problem "$dir does not render"
		continue
	fi
	objects=$(grep -c '^kind:' "$file" || true)
	echo "$dir: $objects objects → $file"
	((objects > 0)) || problem "$dir renders no objects"

	# Every image pinned: a tag, not latest.
	while read -r image; do
		[[ $image =~ :[A-Za-z0-9._-]+$ && ! $image =~ :latest$ ]] || problem "$dir: image $image is not pinned to a tag"
	done < <(sed -n 's/^[[:space:]]*image:[[:space:]]*//p' "$file" | sort -u)

	# The socket every CSI container talks over, as the e2e harness rewrites it.
	grep -qF -- '--endpoint=unix:///csi/csi.sock' "$file" || problem "$dir: no driver on unix:///csi/csi.sock"
	grep -F -- '--csi-address=' "$file" | grep -qvF -- '--csi-address=/csi/csi.sock' &&
		problem "$dir: a --csi-address other than /csi/csi.sock"

	case $name in
	kind)
		[[ $(grep -cF -- '--cloud-endpoint=http://fakecloud.diskforge-system.svc:8787' "$file") == 2 ]] ||
			problem "$dir: controller and node must both point at fakecloud"
		grep -q '^  name: aws-credentials-' "$file" || problem "$dir: no generated aws-credentials Secret"
		;;
	provider)
		# shellcheck disable=SC2016 # $(AWS_REGION) is for the kubelet to expand, not the shell.
		[[ $(grep -cF -- '--region=$(AWS_REGION)' "$file") == 2 ]] ||
			problem "$dir: controller and node must both take the region from diskforge-cloud"
		;;
	esac
done

command -v shellcheck >/dev/null || problem "shellcheck not found (Debian package shellcheck)"
for script in test/e2e/kind/run.sh deploy/check-manifests.sh; do
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
