#!/usr/bin/env bash
# Builds the project's images and loads them into a kind cluster (make kind-load): then
#   helm install diskforge charts/diskforge -n diskforge-system --create-namespace --set fakecloud.enabled=true
# (plus the two image overrides printed at the end when the images are the offline ones) and
#   helm test diskforge -n diskforge-system
#
# kind drives Docker, or podman (KIND_EXPERIMENTAL_PROVIDER=podman, chosen here too when no Docker engine answers).
# With Docker: `make image-docker` builds diskforge/driver:dev and diskforge/fakecloud:dev, loaded with
# `kind load docker-image`; the nodes pull the CSI sidecars. With podman (or KIND_OFFLINE=true) nothing is pulled:
# `make image` builds every image (our two, the sidecars from their modules, our node-driver-registrar and
# livenessprobe, the e2e's test images) as OCI tarballs, all loaded with `kind load image-archive`.
#
# Env: KIND_CLUSTER (kind), KIND_EXPERIMENTAL_PROVIDER, KIND_OFFLINE (true with podman), SKIP_BUILD=true (load
# what was built before).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cluster=${KIND_CLUSTER:-kind}
images_dir=$root/_output/images

die() {
	echo "kind-load: $*" >&2
	exit 1
}
provider=${KIND_EXPERIMENTAL_PROVIDER:-}
if [[ -z $provider ]]; then
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		provider=docker
	elif command -v podman >/dev/null; then
		provider=podman
	else
		die "no Docker engine answers and podman is not installed"
	fi
fi
export KIND_EXPERIMENTAL_PROVIDER=$provider
offline=${KIND_OFFLINE:-}
[[ -n $offline ]] || { [[ $provider == podman ]] && offline=true || offline=false; }
command -v kind >/dev/null || die "kind is not on PATH (go install sigs.k8s.io/kind@v0.33.0)"
kind get clusters 2>/dev/null | grep -qx "$cluster" || die "no kind cluster $cluster ($provider): kind create cluster --name $cluster"

if [[ $offline == true ]]; then
	[[ ${SKIP_BUILD:-false} == true ]] || make image
	[[ -f $images_dir/images.txt ]] || die "no $images_dir/images.txt: make image"
	archives=()
	while read -r _ _ file; do
		[[ -n $file ]] && archives+=("$images_dir/$file")
	done <"$images_dir/images.txt"
	((${#archives[@]} > 0)) || die "$images_dir/images.txt lists no image"
	echo "kind-load: ${#archives[@]} images into $cluster ($provider, offline)"
	kind load image-archive --name "$cluster" "${archives[@]}"
	cat <<'MSG'
kind-load: done. The registrar and livenessprobe are ours (the upstream ones are not built offline):
  helm install diskforge charts/diskforge -n diskforge-system --create-namespace --set fakecloud.enabled=true \
    --set sidecars.nodeDriverRegistrar.image.repository=diskforge/csi-node-driver-registrar \
    --set sidecars.nodeDriverRegistrar.image.tag=dev \
    --set sidecars.livenessProbe.image.repository=diskforge/livenessprobe --set sidecars.livenessProbe.image.tag=dev
  helm test diskforge -n diskforge-system
MSG
else
	[[ ${SKIP_BUILD:-false} == true ]] || make image-docker IMAGE_REPO=diskforge IMAGE_TAG=dev
	kind load docker-image --name "$cluster" diskforge/driver:dev diskforge/fakecloud:dev
	cat <<'MSG'
kind-load: done.
  helm install diskforge charts/diskforge -n diskforge-system --create-namespace --set fakecloud.enabled=true
  helm test diskforge -n diskforge-system
MSG
fi
