#!/usr/bin/env bash
# Installs what this project needs from Debian's packages, only when something is missing, and fetches the Go
# modules. Usage: hack/deps.sh demo|test
#
# Every program the driver, fakecloud, the tests and the scripts run is listed here with the package that ships
# it (checked with `dpkg -S`); only Debian's Essential packages (coreutils, util-linux, findutils, grep, sed, tar,
# gzip, bash, ...) are assumed. Programs that mount-utils runs for the driver count too (mount, umount, blkid,
# fsck, mkfs.*, blockdev).
set -euo pipefail

# package:program. A program is looked up on PATH, or taken as a path when it starts with /.
need=(
	mount:mount mount:umount mount:losetup                 # the node's mounts; fakecloud's loop devices
	util-linux:blkid util-linux:blockdev util-linux:fsck   # mount-utils' format detection and checks
	e2fsprogs:mkfs.ext4 e2fsprogs:e2fsck e2fsprogs:resize2fs e2fsprogs:dumpe2fs
	xfsprogs:mkfs.xfs xfsprogs:xfs_growfs xfsprogs:xfs_info xfsprogs:xfs_io
)
if [[ "${1:-test}" == test ]]; then
	need+=(
		fdisk:sfdisk             # node tests: a partition table the driver must refuse to format
		strace:strace            # pkg/blkprobe: the bytes blkid reads of a blank device
		awscli:/usr/bin/aws      # test/clients: AWS CLI v2
		curl:curl                # test/clients, the kind script
		mawk:awk                 # test/clients (Priority required, but not Essential)
		shellcheck:shellcheck    # make lint
		runc:runc                # the e2e: containers run by Debian's runc
		busybox-static:busybox   # the e2e images' shell and tools (make image)
		iproute2:ip              # the e2e cluster's dummy interface; removing the CNI bridge
		util-linux:unshare util-linux:nsenter # the e2e nodes' mount namespaces
	)
fi

missing=()
for item in "${need[@]}"; do
	pkg=${item%%:*} cmd=${item#*:}
	if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x "$cmd" ]]; then
		missing+=("$pkg")
	fi
done
# go mod download reaches the module proxy over TLS.
[[ -e /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
# test/clients runs boto3 with python3 from PATH; without one that has it, Debian's python3 with python3-boto3.
if [[ "${1:-test}" == test ]] && ! python3 -c 'import boto3' >/dev/null 2>&1 &&
	! /usr/bin/python3 -c 'import boto3' >/dev/null 2>&1; then
	missing+=(python3 python3-boto3)
fi
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
