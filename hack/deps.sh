#!/usr/bin/env bash
# Installs what this project needs from Debian's packages, only when something is missing, and fetches the Go
# modules. Usage: hack/deps.sh demo|test
set -euo pipefail

need=(e2fsprogs:mkfs.ext4 e2fsprogs:resize2fs xfsprogs:mkfs.xfs xfsprogs:xfs_growfs util-linux:losetup util-linux:blkid util-linux:blockdev)
if [[ "${1:-test}" == test ]]; then
	# The e2e: containers run by Debian's runc; busybox-static is the e2e images' shell and tools (make image);
	# iproute2 makes the cluster's dummy interface and removes the CNI bridge; ca-certificates go into images.
	need+=(awscli:/usr/bin/aws shellcheck:shellcheck curl:curl runc:runc busybox-static:busybox iproute2:ip
		util-linux:unshare util-linux:nsenter ca-certificates:/etc/ssl/certs/ca-certificates.crt)
fi

missing=()
for item in "${need[@]}"; do
	pkg=${item%%:*} cmd=${item#*:}
	if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x "$cmd" ]]; then
		missing+=("$pkg")
	fi
done
if ((${#missing[@]})); then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	if [[ $(id -u) -ne 0 ]]; then
		echo "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install -y ${missing[*]})" >&2
		exit 1
	fi
	echo "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
go mod download
