#!/usr/bin/env bash
# Installs what this project needs from Debian's packages, only when something is missing, and fetches the Go
# modules. Usage: hack/deps.sh demo|test|kind
#
# kind (make e2e-kind): with a Docker engine that answers, only what the kind script runs; otherwise podman,
# set up to run kind's nodes as root here (see below), and debootstrap for the offline node image.
#
# Every program the driver, fakecloud, the tests and the scripts run is listed here with the package that ships
# it (checked with `dpkg -S`); only Debian's Essential packages (coreutils, util-linux, findutils, grep, sed, tar,
# gzip, bash, ...) are assumed. Programs that mount-utils runs for the driver count too (mount, umount, blkid,
# fsck, mkfs.*, blockdev).
set -euo pipefail

mode=${1:-test}
case "$mode" in
demo | test) target=$mode ;;
kind) target=e2e-kind ;;
*)
	echo "usage: hack/deps.sh demo|test|kind" >&2
	exit 2
	;;
esac

# What no package install can fix is said first, plainly.
if [[ $(id -u) -ne 0 ]]; then
	echo "make $target needs root: loop devices, mounts and mkfs. Run it as root, or with sudo keeping Go on PATH:" >&2
	echo "  sudo env \"PATH=\$PATH\" make $target    (sudo's secure_path would drop Go's directory)" >&2
	exit 1
fi
if ! command -v go >/dev/null 2>&1; then
	echo "Go is not on PATH. Install Go $(sed -n 's/^go //p' go.mod) or newer (https://go.dev/dl) and add its bin" \
		"directory, e.g. export PATH=/usr/local/go/bin:\$PATH" >&2
	exit 1
fi
if [[ ! -e /dev/loop-control ]]; then
	echo "No /dev/loop-control: this kernel offers no loop devices here. Load the module (modprobe loop), or in a" \
		"container run privileged with /dev mounted from the host." >&2
	exit 1
fi

# package:program. A program is looked up on PATH, or taken as a path when it starts with / (then any file
# there will do: headers count too).
need=(
	mount:mount mount:umount mount:losetup                 # the node's mounts; fakecloud's loop devices
	git:git                                                # the Makefile's version stamp; the e2e's run record
	util-linux:blkid util-linux:blockdev util-linux:fsck   # mount-utils' format detection and checks
	e2fsprogs:mkfs.ext4 e2fsprogs:mkfs.ext3 e2fsprogs:e2fsck e2fsprogs:resize2fs e2fsprogs:dumpe2fs
	xfsprogs:mkfs.xfs xfsprogs:xfs_growfs xfsprogs:xfs_info xfsprogs:xfs_io
)
if [[ "$mode" == test ]]; then
	need+=(
		gcc:gcc libc6-dev:/usr/include/stdio.h # go test -race needs cgo
		fdisk:sfdisk             # node tests: a partition table the driver must refuse to format
		e2fsprogs:tune2fs        # node tests: ext4 bigalloc's cluster size
		strace:strace            # pkg/blkprobe: the bytes blkid reads of a blank device
		awscli:/usr/bin/aws      # test/clients: AWS CLI v2; its botocore holds EC2's model (pkg/fakecloud/ec2model)
		curl:curl                # test/clients, the kind script
		mawk:awk                 # test/clients (Priority required, but not Essential)
		shellcheck:shellcheck    # make lint
		runc:runc                # the e2e: containers run by Debian's runc
		busybox-static:busybox   # the e2e images' shell and tools (make image)
		iproute2:ip              # the e2e cluster's dummy interface; removing the CNI bridge
		util-linux:unshare util-linux:nsenter # the e2e nodes' mount namespaces
	)
fi

# kind drives a Docker engine when one answers (and KIND_EXPERIMENTAL_PROVIDER does not say podman), else podman,
# which needs netavark and aardvark-dns (kind's nodes reach each other by name), iptables (netavark's firewall),
# and debootstrap for the offline node image (hack/build-kind-node-image.sh).
kind_podman=false
if [[ "$mode" == kind ]]; then
	need+=(curl:curl tar:tar mawk:awk)
	if [[ ${KIND_EXPERIMENTAL_PROVIDER:-} == podman ]] || ! docker info >/dev/null 2>&1; then
		kind_podman=true
		need+=(podman:podman netavark:/usr/lib/podman/netavark aardvark-dns:/usr/lib/podman/aardvark-dns
			iptables:iptables debootstrap:debootstrap)
	fi
fi

missing=()
for item in "${need[@]}"; do
	pkg=${item%%:*} cmd=${item#*:}
	if ! command -v "$cmd" >/dev/null 2>&1 && [[ "$cmd" != /* || ! -e "$cmd" ]]; then
		missing+=("$pkg")
	fi
done
# go mod download reaches the module proxy over TLS.
[[ -e /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
# test/clients runs boto3 with python3 from PATH; without one that has it, Debian's python3 with python3-boto3.
if [[ "$mode" == test ]] && ! python3 -c 'import boto3' >/dev/null 2>&1 &&
	! /usr/bin/python3 -c 'import boto3' >/dev/null 2>&1; then
	missing+=(python3 python3-boto3)
fi
if ((${#missing[@]})); then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	echo "installing ${missing[*]}"
	apt-get update -qq
	install=(-y -qq)
	if [[ "$mode" == kind ]]; then
		# podman's recommendations (buildah, fuse-overlayfs, slirp4netns, ...) serve rootless use, not kind's nodes.
		install+=(--no-install-recommends)
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install "${install[@]}" "${missing[@]}" >/dev/null
fi
# podman asks for a larger open-files limit for every container than root may set where it lacks
# CAP_SYS_RESOURCE ("error setting rlimit type 7: operation not permitted"): no default limits then, and the
# containers keep the limits podman runs with. Added once to /etc/containers/containers.conf, under [containers].
if [[ $kind_podman == true ]]; then
	conf=/etc/containers/containers.conf
	if ! grep -qE '^[[:space:]]*default_ulimits[[:space:]]*=' "$conf" 2>/dev/null; then
		echo "setting default_ulimits = [] in $conf"
		mkdir -p /etc/containers
		touch "$conf"
		if grep -q '^\[containers\]' "$conf"; then
			sed -i '/^\[containers\]/a default_ulimits = []' "$conf"
		else
			printf '\n[containers]\ndefault_ulimits = []\n' >>"$conf"
		fi
	fi
fi
go mod download
