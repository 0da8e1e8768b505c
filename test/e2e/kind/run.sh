#!/usr/bin/env bash
# The e2e scenarios on kind: creates a cluster of a control plane and three workers (kind-config.yaml, which
# names no zones or labels), loads the images into it as a user does (hack/kind-load.sh, make kind-load), applies
# the snapshot CRDs and the kind overlay (fakecloud inside the cluster makes every Node an instance and labels it
# with its instance ID and zone; the node plugin runs on every node and makes the loop device nodes it and kubelet
# need), waits for the driver, then runs the
# scenarios of test/e2e (test/e2e/scenarios) against the cluster's kubeconfig, with fakecloud reached through a
# port-forward for their cloud-side checks. At the end the cluster is deleted, also after a failure, and the
# machine is put back as it was: the cluster's network when the run made it, loop devices of the cluster's
# disks, and the kernel settings the nodes changed (the kubelets set vm.overcommit_memory, kernel.panic...).
#
# kind drives Docker, or podman with KIND_EXPERIMENTAL_PROVIDER=podman (chosen here too when no Docker engine
# answers). With Docker the run is what a kind user expects: kind's own node image, the driver and fakecloud
# built with `make image-docker` and loaded with `kind load docker-image`, the sidecars pulled by the nodes.
# With podman, or KIND_OFFLINE=true, nothing is pulled: the node image is built offline
# (hack/build-kind-node-image.sh), every image comes from `make image` (_output/images, loaded with `kind load
# image-archive`), and the overlay is applied with the two image overrides the local e2e cluster uses (our
# node-driver-registrar and livenessprobe, which the Go module proxy does not serve).
#
# Needs Go, curl and Docker or podman (hack/deps.sh kind installs what is missing, and sets podman up); kubectl
# and kind v0.33.0 are built with Go when missing. Root for podman.
#
# With --single (make e2e-kind-single) it proves instead what a user's first cluster gets: kind's default cluster
# of one node (kind-single.yaml: only the cgroup v1 kubelet patch), the images loaded, the chart installed with
# helm install --set fakecloud.enabled=true and checked with helm test, and the time from kind create cluster to
# a passing helm test printed; then the scenarios against that release, of which those one node can host must
# pass and the others (two nodes in a zone, or two zones) must skip.
#
# Usage: test/e2e/kind/run.sh [--keep] [--skip-build] [--no-test] [--single]
#   --keep        leave the cluster running at the end (by default it is deleted, also after a failure,
#                 once its logs are saved under .cache/kind/logs)
#   --skip-build  use the images already built (Docker: diskforge/driver:dev and diskforge/fakecloud:dev;
#                 offline: _output/images)
#   --no-test     set the cluster up and stop there (implies --keep)
#   --single      one node, installed with helm and checked with helm test (cluster diskforge-single)
# Environment:
#   KIND_EXPERIMENTAL_PROVIDER  docker or podman (docker when its engine answers, else podman)
#   KIND_OFFLINE       true: the offline node image and images (default: true with podman, false with Docker)
#   KIND_CLUSTER_NAME  cluster name (diskforge; diskforge-single with --single)
#   KIND_NODE_IMAGE    node image (kind's default for its version; offline: the one hack/build-kind-node-image.sh builds)
#   KIND_VERSION       kind to install when none is on PATH (v0.33.0)
#   FAKECLOUD_PORT     local port of the port-forward to fakecloud (18787)
#   E2E_TIMEOUT        go test -timeout (60m)
#   E2E_ARGS           more arguments for the scenarios' test binary (e.g. -test.run=TestE2E/S6)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"

single=false
for arg in "$@"; do [[ $arg == --single ]] && single=true; done
cluster=${KIND_CLUSTER_NAME:-$([[ $single == true ]] && echo diskforge-single || echo diskforge)}
kind_version=${KIND_VERSION:-v0.33.0}
port=${FAKECLOUD_PORT:-18787}
ns=diskforge-system
overlay=deploy/kustomize/overlays/kind
images_file=deploy/kustomize/components/images/kustomization.yaml
config=test/e2e/kind/kind-config.yaml
[[ $single == true ]] && config=test/e2e/kind/kind-single.yaml
work=$root/.cache/kind
kubeconfig=$work/kubeconfig
images_dir=$root/_output/images

keep=false
build=true
run_tests=true
for arg in "$@"; do
	case $arg in
	--keep) keep=true ;;
	--single) ;;
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

log() { printf '\n=== %s (%ds)\n' "$*" "$SECONDS"; }
die() {
	echo "error: $*" >&2
	exit 1
}
# Each step's time, printed at the end.
steps=()
step_start=$SECONDS
step_done() {
	steps+=("$(printf '%-28s %5ds' "$1" $((SECONDS - step_start)))")
	step_start=$SECONDS
}

# --- the container engine ----------------------------------------------------------------------------------
provider=${KIND_EXPERIMENTAL_PROVIDER:-}
if [[ -z $provider ]]; then
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		provider=docker
	elif command -v podman >/dev/null; then
		provider=podman
		echo "no Docker engine answers: kind drives podman (KIND_EXPERIMENTAL_PROVIDER=podman)"
	else
		die "kind needs a container engine: no Docker engine answers (docker info) and podman is not installed." \
			"Install Docker, or run hack/deps.sh kind (as root) for podman."
	fi
fi
case $provider in
docker)
	docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed); kind needs one, or podman" \
		"(KIND_EXPERIMENTAL_PROVIDER=podman)"
	;;
podman)
	command -v podman >/dev/null || die "KIND_EXPERIMENTAL_PROVIDER=podman, but podman is not installed (hack/deps.sh kind)"
	[[ $(id -u) -eq 0 ]] || die "kind's podman nodes run as root here (rootless podman is not set up): run as root"
	# kind's nodes find each other by name (kubeadm join reaches <cluster>-control-plane): netavark's DNS.
	backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null) || die "podman info failed"
	[[ $backend == netavark ]] || die "podman uses the $backend network backend; kind's nodes need netavark and" \
		"aardvark-dns to find each other by name (hack/deps.sh kind installs them; podman chooses netavark when" \
		"no CNI network exists, or set network_backend = \"netavark\" in /etc/containers/containers.conf)"
	;;
*) die "KIND_EXPERIMENTAL_PROVIDER=$provider: this script drives docker or podman" ;;
esac
export KIND_EXPERIMENTAL_PROVIDER=$provider
offline=${KIND_OFFLINE:-}
if [[ -z $offline ]]; then
	offline=false
	[[ $provider == podman ]] && offline=true
fi
echo "kind with $provider, $([[ $offline == true ]] && echo "offline node image and images" || echo "kind's node image, images pulled")"

# --- tools -------------------------------------------------------------------------------------------------
for tool in go curl; do
	command -v "$tool" >/dev/null || die "$tool is needed"
done
mkdir -p "$work/bin"
export PATH="$work/bin:$PATH"
if ! command -v kind >/dev/null; then
	log "installing kind $kind_version into $work/bin"
	GOBIN="$work/bin" go install "sigs.k8s.io/kind@$kind_version"
fi
step_done "tools"

# The snapshot CRDs come from the same external-snapshotter release as the snapshot-controller image.
snapshot_version=$(awk '$NF == "registry.k8s.io/sig-storage/snapshot-controller" { getline; print $NF; exit }' "$images_file")
[[ $snapshot_version == v* ]] || die "no snapshot-controller tag found in $images_file"

# --- the machine as it was, and teardown -------------------------------------------------------------------
# Kernel-wide settings a privileged node may write (kernel.*, vm.*, fs.*) and the host's IP forwarding (the
# container network turns it on), as path:value, one line each; counters and values the kernel changes itself
# are left out.
sysctl_snapshot() {
	# grep says 2 for the write-only files it cannot read; what it read is what counts.
	{ grep -rs --exclude-dir=binfmt_misc '' /proc/sys/kernel /proc/sys/vm /proc/sys/fs /proc/sys/net/ipv4/ip_forward \
		/proc/sys/net/ipv4/conf/all/forwarding || true; } |
		grep -Ev '^/proc/sys/(kernel/(random/|ns_last_pid|pty/nr|tainted|perf_event_max_sample_rate|sched_domain/)|fs/(dentry-state|file-nr|inode-nr|inode-state|aio-nr|binfmt_misc/|quota/)|vm/(drop_caches|stat_refresh|compact_memory))' |
		awk -F: '{ n[$1]++; v[$1] = substr($0, length($1) + 2) } END { for (p in n) if (n[p] == 1) print p ":" v[p] }' |
		sort
}
sysctls_before=$work/sysctls.before
sysctl_snapshot >"$sysctls_before"
# kind's known issue: each node's systemd, kubelet and pods take inotify instances, all counted against root
# when the nodes run as root; the usual default (128) runs out with four nodes. Raised for the run (root only),
# and put back at the end with the rest.
if [[ $(id -u) -eq 0 && $(cat /proc/sys/fs/inotify/max_user_instances) -lt 512 ]]; then
	echo 512 >/proc/sys/fs/inotify/max_user_instances
fi
# kind mounts the host's /lib/modules into every node; a kernel with everything built in may have none, and
# podman refuses a missing mount source (Docker would make the directory and leave it). An empty one for the run.
made_modules=false
if [[ ! -e /lib/modules ]] && mkdir /lib/modules 2>/dev/null; then made_modules=true; fi
network_existed=false
"$provider" network inspect kind >/dev/null 2>&1 && network_existed=true
mounts_before=$(findmnt -rn -o TARGET | sort)
# podman keeps its containers' network namespaces in /run/netns, a mount of its own that outlives them.
netns_existed=false
[[ -e /run/netns ]] && netns_existed=true
# firewall prints the host's firewall rules and chains of its own (iptables leaves the tables it once made, empty).
firewall() {
	if command -v iptables-save >/dev/null; then
		{ iptables-save 2>/dev/null || true; } |
			awk '/^\*/ { table = $1 } /^-A/ || (/^:/ && $1 !~ /^:(INPUT|FORWARD|OUTPUT|PREROUTING|POSTROUTING)$/) { print table, (/^:/ ? $1 : $0) }'
	fi
}
firewall_before=$(firewall)

# restore_sysctls writes back every setting that differs from before the run.
restore_sysctls() {
	local path old now
	while IFS= read -r line; do
		path=${line%%:*} old=${line#*:}
		now=$(cat "$path" 2>/dev/null) || continue
		if [[ $now != "$old" && -w $path ]]; then
			if printf '%s\n' "$old" >"$path" 2>/dev/null; then
				echo "restored ${path#/proc/sys/}: $now -> $old"
			else
				echo "warning: could not restore ${path#/proc/sys/} to $old (now $now)" >&2
			fi
		fi
	done <"$sysctls_before"
}

# node_var_dirs prints the host directories of the nodes' /var volumes, where fakecloud keeps its disks.
node_var_dirs() {
	local node
	for node in $(kind get nodes --name "$cluster" 2>/dev/null); do
		"$provider" inspect --format '{{range .Mounts}}{{if eq .Destination "/var"}}{{.Source}}{{end}}{{end}}' "$node" 2>/dev/null || true
	done
}

# release_loops detaches the loop devices whose backing file is in one of the directories: fakecloud's disks
# stay bound when its node goes, as disks stay attached when a control plane stops.
release_loops() {
	local dev file dir
	(($# > 0)) || return 0
	while read -r dev file; do
		for dir in "$@"; do
			if [[ -n $dir && $file == "$dir"/* ]]; then
				losetup -d "$dev" && echo "released $dev ($file)"
			fi
		done
	done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null)
}

# remove_netavark_chains removes netavark's own firewall chains (and the rules that jump to them), which outlive
# its last network, when there were none before the run.
remove_netavark_chains() {
	local table rule chain
	[[ $provider == podman && $firewall_before != *NETAVARK* ]] && command -v iptables >/dev/null || return 0
	for table in filter nat; do
		iptables -t "$table" -S 2>/dev/null | grep -- '^-A .* -j NETAVARK' | while IFS= read -r rule; do
			eval "iptables -t $table -D ${rule#-A }"
		done
		for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ { print $2 }'); do
			iptables -t "$table" -F "$chain" && iptables -t "$table" -X "$chain"
		done
	done
}

pf_pid=
in_scenarios=false
cleanup() {
	local rc=$? left
	set +e
	# The scenarios' time is its own line also when they fail.
	[[ $in_scenarios == true ]] && step_done "scenarios (failed)"
	if [[ -n $pf_pid ]]; then
		kill "$pf_pid" 2>/dev/null
		wait "$pf_pid" 2>/dev/null
	fi
	if ((rc != 0)) && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
		echo "failed (exit $rc); cluster state:" >&2
		kubectl get nodes,pods -A -o wide >&2
		rm -rf "$work/logs"
		kind export logs "$work/logs" --name "$cluster" >/dev/null 2>&1
		echo "logs of every node and pod: $work/logs" >&2
	fi
	if [[ $keep == true ]]; then
		echo "cluster $cluster kept: export KUBECONFIG=$kubeconfig; delete it with: kind delete cluster --name $cluster"
	else
		if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
			log "deleting cluster $cluster"
			mapfile -t var_dirs < <(node_var_dirs)
			kind delete cluster --name "$cluster"
			release_loops "${var_dirs[@]}"
		fi
		if [[ $network_existed == false ]] && "$provider" network inspect kind >/dev/null 2>&1; then
			"$provider" network rm kind >/dev/null && echo "removed the $provider network kind"
		fi
		[[ $(id -u) -eq 0 ]] && restore_sysctls
		if [[ $made_modules == true ]]; then rmdir /lib/modules; fi
		remove_netavark_chains
		if [[ $netns_existed == false && -d /run/netns && -z $(ls -A /run/netns) ]]; then
			while findmnt /run/netns >/dev/null; do umount /run/netns || break; done
			rmdir /run/netns
		fi
		left=$(diff <(printf '%s\n' "$firewall_before" | sed '/^$/d') <(firewall) | grep '^[<>]')
		[[ -z $left ]] || echo "warning: the host's firewall rules changed during the run:"$'\n'"$left" >&2
		left=$("$provider" ps -aq --filter "label=io.x-k8s.kind.cluster=$cluster")
		[[ -z $left ]] || echo "warning: containers of $cluster left: $left" >&2
		left=$(comm -13 <(echo "$mounts_before") <(findmnt -rn -o TARGET | sort))
		[[ -z $left ]] || echo "warning: mounts made during the run are still there:"$'\n'"$left" >&2
		step_done "teardown"
	fi
	echo
	echo "kind e2e with $provider$([[ $offline == true ]] && echo ", offline"): exit $rc"
	printf '  %s\n' "${steps[@]}"
	printf '  %-28s %5ds\n' total "$SECONDS"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forward_fakecloud port-forwards $port to fakecloud's Service (kept open until the end) and exports the
# credentials the scenarios' cloud checks use from the Secret $1: they sign EC2 requests with the driver's key
# and read /admin with the token.
forward_fakecloud() {
	local secret=$1
	kubectl -n "$ns" port-forward service/fakecloud "$port:8787" >"$work/port-forward.log" 2>&1 &
	pf_pid=$!
	for _ in $(seq 1 30); do
		curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
		sleep 1
	done
	curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || die "fakecloud unreachable through the port-forward ($work/port-forward.log)"
	CLOUD_ACCESS_KEY_ID=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.key_id}' | base64 -d)
	CLOUD_SECRET_ACCESS_KEY=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.access_key}' | base64 -d)
	CLOUD_ADMIN_TOKEN=$(kubectl -n "$ns" get "$secret" -o jsonpath='{.data.admin_token}' | base64 -d)
	[[ -n $CLOUD_ACCESS_KEY_ID && -n $CLOUD_SECRET_ACCESS_KEY && -n $CLOUD_ADMIN_TOKEN ]] ||
		die "$secret in $ns lacks key_id, access_key or admin_token"
	export CLOUD_ACCESS_KEY_ID CLOUD_SECRET_ACCESS_KEY CLOUD_ADMIN_TOKEN
}

# require_results checks that the scenarios' log reports each scenario named once with the result $1 (PASS or
# SKIP), and no other scenario with it.
require_results() {
	local result=$1 name count
	shift
	for name in "$@"; do
		[[ $(grep -c -- "--- $result: TestE2E/$name " "$work/scenarios.log") == 1 ]] ||
			die "scenario $name: not $result once (see $work/scenarios.log)"
	done
	count=$(grep -c -- "--- $result: TestE2E/" "$work/scenarios.log" || true)
	((count == $#)) || die "$count scenarios reported $result, $# expected (see $work/scenarios.log)"
}

# run_scenarios runs the scenarios of test/e2e (a module of its own) against the cluster's kubeconfig, and
# fakecloud through the port-forward for their cloud-side checks. No host checks: the kubelets run in kind's
# containers, not on this machine. A scenario skips when the cluster cannot host it (too few nodes in a zone):
# without a -test.run of the caller's (E2E_ARGS), each scenario TestE2E lists must be in exactly one of the
# two lists, and must have passed, or skipped, once.
#   run_scenarios "<scenarios that must pass>" "<scenarios that must skip>"
run_scenarios() {
	local -a must_pass must_skip extra listed
	read -r -d '' -a must_pass <<<"$1" || true # the lists may span lines
	read -r -d '' -a must_skip <<<"$2" || true
	read -r -a extra <<<"${E2E_ARGS:-}"
	if [[ -n $test_image ]]; then extra=("-test-image=$test_image" ${extra[@]+"${extra[@]}"}); fi
	log "e2e scenarios against $kubeconfig"
	in_scenarios=true
	(cd test/e2e && go test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-60m}" ./scenarios/ -run '^TestE2E$' \
		-args -kubeconfig="$kubeconfig" -cloud-url="http://127.0.0.1:$port" ${extra[@]+"${extra[@]}"}) |
		tee "$work/scenarios.log"
	if [[ -z ${E2E_ARGS:-} ]]; then
		mapfile -t listed < <(sed -n 's/^[[:space:]]*r\.scenario(t, "\([^"]*\)".*/\1/p' test/e2e/scenarios/e2e_test.go)
		((${#listed[@]} > 0)) || die "no scenarios found in test/e2e/scenarios/e2e_test.go"
		local name other count
		for name in "${listed[@]}"; do
			count=0
			for other in ${must_pass[@]+"${must_pass[@]}"} ${must_skip[@]+"${must_skip[@]}"}; do
				if [[ $other == "$name" ]]; then count=$((count + 1)); fi
			done
			((count == 1)) || die "scenario $name of e2e_test.go is $count times in the lists of what must pass or skip"
		done
		((${#listed[@]} == ${#must_pass[@]} + ${#must_skip[@]})) ||
			die "the lists of what must pass or skip name scenarios TestE2E does not list"
		require_results PASS ${must_pass[@]+"${must_pass[@]}"}
		require_results SKIP ${must_skip[@]+"${must_skip[@]}"}
		echo "${#must_pass[@]} scenarios passed${must_skip[*]:+, ${#must_skip[@]} skipped as expected (${must_skip[*]})}"
	fi
	in_scenarios=false
	step_done "scenarios"
}

# --- 1. images and the node image --------------------------------------------------------------------------
node_image=${KIND_NODE_IMAGE:-}
if [[ $offline == true ]]; then
	if [[ -z $node_image ]]; then
		log "the offline node image (hack/build-kind-node-image.sh)"
		node_image=$(hack/build-kind-node-image.sh | tail -n1)
		step_done "node image"
	fi
fi

# kubectl: the machine's, else the one the node image build made, else one built here.
export PATH="$PATH:$root/.cache/kind-node/bin"
if ! command -v kubectl >/dev/null; then
	log "building kubectl into $work/bin (tools/kindnode/upstream/kube)"
	(cd tools/kindnode/upstream/kube && go build -o "$work/bin/kubectl" k8s.io/kubernetes/cmd/kubectl)
fi

# The manifests: the overlay as it is, or (offline) with the local e2e cluster's two image overrides
# (test/e2e/localimages, which test/e2e/cluster deploys too).
manifests=$work/kind.yaml
if [[ $offline == true ]]; then
	kubectl kustomize test/e2e/localimages >"$manifests"
else
	kubectl kustomize "$overlay" >"$manifests"
fi

# --- 2. cluster --------------------------------------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	log "reusing cluster $cluster"
	kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig"
else
	log "creating cluster $cluster ($config${node_image:+, $node_image})"
	created_at=$SECONDS
	kind create cluster --name "$cluster" --config "$config" --kubeconfig "$kubeconfig" --wait 5m \
		${node_image:+--image "$node_image"}
fi
export KUBECONFIG=$kubeconfig

step_done "kind create cluster"

# --- 3. images into the nodes ------------------------------------------------------------------------------
log "loading the images into $cluster (hack/kind-load.sh)"
KIND_CLUSTER=$cluster KIND_OFFLINE=$offline SKIP_BUILD=$([[ $build == true ]] && echo false || echo true) hack/kind-load.sh
test_image=
if [[ $offline == true ]]; then
	# The scenarios' busybox, among the images make image built (kind-load loads them all).
	test_image=$(awk '$1 ~ /\/e2e-test-images\/busybox:/ { print $1; exit }' "$images_dir/images.txt")
	[[ -n $test_image ]] || die "no busybox test image in $images_dir/images.txt"
fi
step_done "load images"

# --- 3b. --single: the chart, as a user installs it, and helm test --------------------------------------------
if [[ $single == true ]]; then
	hack/build-e2e-tools.sh helm
	helm=$root/.cache/e2e-bin/helm
	export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data
	offline_images=()
	if [[ $offline == true ]]; then
		offline_images=(--set sidecars.nodeDriverRegistrar.image.repository=diskforge/csi-node-driver-registrar
			--set sidecars.nodeDriverRegistrar.image.tag=dev
			--set sidecars.livenessProbe.image.repository=diskforge/livenessprobe --set sidecars.livenessProbe.image.tag=dev)
	fi
	# fakecloud serves its volumes through its own FUSE filesystem, as in the four-node run
	# (test/e2e/localimages): the scenarios enforce IOPS (S10) and inject I/O faults (S11), which the chart's
	# loop backend cannot (its --backend=loop is overridden by the later flag).
	log "helm install diskforge charts/diskforge -n $ns --create-namespace --set fakecloud.enabled=true (fuse backend)"
	"$helm" install diskforge charts/diskforge -n "$ns" --create-namespace --set fakecloud.enabled=true \
		--set 'fakecloud.extraArgs={--backend=fuse}' "${offline_images[@]}" --wait --timeout 5m
	kubectl get nodes -L node.diskforge.io/instance-id -L topology.kubernetes.io/zone
	step_done "helm install"
	if [[ $run_tests == true ]]; then
		log "helm test diskforge -n $ns"
		"$helm" test diskforge -n "$ns" --logs --timeout 20m
		step_done "helm test"
		if [[ -n ${created_at:-} ]]; then
			echo "from kind create cluster to a passing helm test: $((SECONDS - created_at))s"
		fi
		# The scenarios against the release: the chart's credentials Secret (cloud.credentials.secretName,
		# installed with its default). On one node in one zone, those needing two nodes in a zone (S2, S3b on
		# S2's volume, S8) or two zones (S6) skip.
		forward_fakecloud secret/aws-credentials
		run_scenarios "S0_volume_limits S1_wffc_zone_b S3_online_expansion_xfs S9_tags S4_snapshot_restore S4b_clone
			S4c_group_snapshot S5_block S10_provisioned_iops S11_io_faults S12_node_metrics S7_teardown" \
			"S2_move_within_zone S3b_offline_expansion_ext4 S6_allowed_topologies S8_volume_limit"
	fi
	exit 0
fi

# --- 4. snapshot CRDs (the overlay's vendored copy, as the chart's crds/) --------------------------------------
log "snapshot CRDs of external-snapshotter $snapshot_version"
kubectl apply --server-side -k "$overlay/snapshot-controller/crds"
kubectl wait --for=condition=Established --timeout=60s \
	crd/volumesnapshotclasses.snapshot.storage.k8s.io \
	crd/volumesnapshotcontents.snapshot.storage.k8s.io \
	crd/volumesnapshots.snapshot.storage.k8s.io

# --- 5. everything in one apply, as a user does ----------------------------------------------------------
# fakecloud registers every Node as an instance and labels it (kube-nodes); the node plugins wait for the labels.
log "the driver and fakecloud ($overlay)"
kubectl apply --server-side -f "$manifests"
kubectl -n "$ns" rollout status deployment/fakecloud --timeout=3m
# The credentials Secret's name carries kustomize's hash.
secret=$(kubectl -n "$ns" get secrets -o name | grep -m1 '^secret/aws-credentials') || die "no aws-credentials Secret in $ns"
forward_fakecloud "$secret"

# --- 6. the driver -----------------------------------------------------------------------------------------
kubectl -n kube-system rollout status deployment/snapshot-controller --timeout=5m
kubectl -n "$ns" rollout status deployment/diskforge-controller --timeout=5m
kubectl -n "$ns" rollout status daemonset/diskforge-node --timeout=5m

# The kubelet registers the plugin on each node, the control plane's too: its CSINode lists the driver. Every
# Node carries the instance ID and zone fakecloud gave it.
want=$(kubectl get nodes -o name | wc -l)
for _ in $(seq 1 60); do
	have=$(kubectl get csinodes -o jsonpath='{range .items[*]}{.spec.drivers[*].name}{"\n"}{end}' |
		grep -cx disk.csi.diskforge.io || true)
	((have >= want)) && break
	sleep 2
done
((have >= want)) || die "the driver is registered on $have of $want nodes"
kubectl get nodes -L node.diskforge.io/instance-id -L topology.kubernetes.io/zone
kubectl get csinodes -o custom-columns='NODE:.metadata.name,DRIVERS:.spec.drivers[*].name,NODE-ID:.spec.drivers[*].nodeID'
step_done "deploy and register"

# --- 7. the e2e scenarios ----------------------------------------------------------------------------------
if [[ $run_tests == false ]]; then
	log "ready: export KUBECONFIG=$kubeconfig"
	exit 0
fi
# With the layout of kind-config.yaml every scenario TestE2E lists must pass.
mapfile -t scenarios < <(sed -n 's/^[[:space:]]*r\.scenario(t, "\([^"]*\)".*/\1/p' test/e2e/scenarios/e2e_test.go)
run_scenarios "${scenarios[*]}" ""
