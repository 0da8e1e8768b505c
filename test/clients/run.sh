#!/usr/bin/env bash
# run.sh proves fakecloud works with EC2 clients we did not write: it starts a throwaway fakecloud for each
# client and runs a volume's whole life through AWS CLI v2 (test/clients/cli.sh), AWS CLI v1 when present, and
# boto3 (test/clients/boto3_lifecycle.py), the snapshot actions through boto3 (test/clients/boto3_snapshots.py),
# EC2's answers to wrong requests through boto3 (test/clients/boto3_answers.py) and instances launched from the
# built-in images through boto3 (test/clients/boto3_instances.py), then tears everything down.
#
# Usage: bash test/clients/run.sh
#
# Environment:
#   FAKECLOUD_BIN      a built fakecloud to use (default: build ./cmd/fakecloud into the temp dir)
#   FAKECLOUD_BACKEND  loop or file (default: loop when root and /dev/loop-control exist, else file)
#   AWS_CLI_V2         AWS CLI v2 binary (default /usr/bin/aws; required)
#   AWS_CLI_V1         AWS CLI v1 binary (default: `aws` on PATH when it is v1; set to "" to skip it, ~30s)
#   PYTHON             python with boto3 (default python3 when it has boto3, else Debian's /usr/bin/python3)
#   CLIENTS_INSTALL    1 (default): as root, apt-get install awscli when AWS_CLI_V2 is missing; 0 to refuse
#
# Each client gets its own fakecloud and data dir under one temp dir. Teardown (always, by trap) stops
# fakecloud, releases the loop devices backed by files in that temp dir (fakecloud keeps devices bound across
# restarts by design) and no other, and removes the temp dir. Prints PASS/FAIL per client, then
# "clients: N passed, N failed"; exits non-zero on any failure.
#
# Needs: go (unless FAKECLOUD_BIN), curl, python3 with boto3, Debian's awscli (CLI v2), util-linux (blockdev,
# losetup) for the loop backend.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

INSTANCE_A=i-0123456789abcdef0
INSTANCE_B=i-0fedcba9876543210
if [[ -z ${PYTHON:-} ]]; then
	PYTHON=python3
	if ! python3 -c 'import boto3' 2>/dev/null && [[ -x /usr/bin/python3 ]]; then
		PYTHON=/usr/bin/python3 # hack/deps.sh installs python3-boto3 for it
	fi
fi
AWS_CLI_V2=${AWS_CLI_V2:-/usr/bin/aws}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fakecloud-clients.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
FC_PID=""
FC_DATA=""
CLIENT_PID=""

log() { printf '[run] %s\n' "$*"; }

# release_loops DIR detaches every loop device whose backing file lies inside DIR, and no other.
release_loops() {
	local dir=$1 f dev backing
	[[ -d /sys/block ]] || return 0
	for f in /sys/block/loop*/loop/backing_file; do
		[[ -r $f ]] || continue
		backing=$(cat "$f" 2>/dev/null || true)
		[[ $backing == "$dir"/* ]] || continue
		dev=/dev/$(basename "$(dirname "$(dirname "$f")")")
		log "releasing $dev (backing $backing)"
		losetup -d "$dev" || log "WARNING: losetup -d $dev failed"
	done
}

# unmount_under DIR unmounts anything mounted at or below DIR (nothing should be; this only guards).
unmount_under() {
	local dir=$1 mnt
	[[ -r /proc/self/mounts ]] || return 0
	while read -r mnt; do
		log "unmounting $mnt"
		umount -l "$mnt" || log "WARNING: umount $mnt failed"
	done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
}

stop_fakecloud() {
	if [[ -n $FC_PID ]]; then
		kill -TERM "$FC_PID" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$FC_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$FC_PID" 2>/dev/null; then
			log "fakecloud $FC_PID ignored SIGTERM; killing it"
			kill -KILL "$FC_PID" 2>/dev/null || true
		fi
		wait "$FC_PID" 2>/dev/null || true
		FC_PID=""
	fi
	# fakecloud keeps loop devices bound across restarts by design; this run's devices die with its data dir.
	if [[ -n $FC_DATA ]]; then
		unmount_under "$FC_DATA"
		release_loops "$FC_DATA"
		FC_DATA=""
	fi
}

cleanup() {
	local rc=$?
	set +e
	if [[ -n $CLIENT_PID ]]; then
		kill -TERM "$CLIENT_PID" 2>/dev/null
		wait "$CLIENT_PID" 2>/dev/null
	fi
	stop_fakecloud
	unmount_under "$WORK"
	release_loops "$WORK"
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_fakecloud NAME starts a fresh fakecloud with its own data dir and sets ENDPOINT; it retries on a port
# taken between picking and binding.
start_fakecloud() {
	local name=$1 attempt port deadline
	for attempt in 1 2 3; do
		FC_DATA=$WORK/$name-data-$attempt
		mkdir -p "$FC_DATA"
		port=$(free_port)
		ENDPOINT=http://127.0.0.1:$port
		FC_LOG=$WORK/$name-fakecloud.log
		"$FAKECLOUD_BIN" --listen "127.0.0.1:$port" --data-dir "$FC_DATA" --backend "$BACKEND" \
			--instances "$INSTANCE_A=us-east-1a,$INSTANCE_B=us-east-1b" --no-fsync \
			--create-duration 100ms --delete-duration 100ms --attach-duration 100ms --detach-duration 100ms \
			--modifying-duration 100ms --optimizing-duration 100ms --snapshot-duration 100ms \
			--instance-start-duration 100ms --instance-stop-duration 100ms --instance-terminate-duration 100ms \
			>"$FC_LOG" 2>&1 &
		FC_PID=$!
		deadline=$((SECONDS + 15))
		while ((SECONDS < deadline)); do
			if ! kill -0 "$FC_PID" 2>/dev/null; then
				break
			fi
			if [[ $(curl -fsS --max-time 2 "$ENDPOINT/healthz" 2>/dev/null) == ok ]]; then
				log "fakecloud ($BACKEND backend) for $name at $ENDPOINT, pid $FC_PID"
				return 0
			fi
			sleep 0.1
		done
		log "fakecloud did not come up (attempt $attempt); its log:"
		sed 's/^/    /' "$FC_LOG" >&2
		stop_fakecloud
	done
	return 1
}

declare -a SUMMARY=()
FAILED=0

# run_client NAME COMMAND... runs one client against a fresh fakecloud and records PASS or FAIL.
run_client() {
	local name=$1 start rc=0
	shift
	start=$SECONDS
	log "=== $name ==="
	if ! start_fakecloud "$name"; then
		SUMMARY+=("FAIL $name (fakecloud did not start)")
		FAILED=1
		return 0
	fi
	# In the background so that a signal to this script is handled at once, not after the client ends.
	FAKECLOUD_ENDPOINT=$ENDPOINT FAKECLOUD_INSTANCE_A=$INSTANCE_A FAKECLOUD_INSTANCE_B=$INSTANCE_B \
		FAKECLOUD_BACKEND=$BACKEND "$@" &
	CLIENT_PID=$!
	wait "$CLIENT_PID" || rc=$?
	CLIENT_PID=""
	if ((rc == 0)) && ! kill -0 "$FC_PID" 2>/dev/null; then
		log "fakecloud exited during the run"
		rc=1
	fi
	if ((rc != 0)); then
		log "fakecloud log for $name (last 40 lines):"
		tail -n 40 "$FC_LOG" | sed 's/^/    /' >&2
	fi
	stop_fakecloud
	if ((rc == 0)); then
		SUMMARY+=("PASS $name ($((SECONDS - start))s)")
	else
		SUMMARY+=("FAIL $name (exit $rc, $((SECONDS - start))s)")
		FAILED=1
	fi
}

# Pick the backend.
if [[ -n ${FAKECLOUD_BACKEND:-} ]]; then
	BACKEND=$FAKECLOUD_BACKEND
elif [[ $(id -u) == 0 && -e /dev/loop-control ]]; then
	BACKEND="loop"
else
	BACKEND="file"
fi
case $BACKEND in
loop | file) ;;
*) echo "FAKECLOUD_BACKEND must be loop or file, not '$BACKEND'" >&2 && exit 2 ;;
esac

# AWS CLI v2 is required: Debian's awscli package.
if [[ ! -x $AWS_CLI_V2 && ${CLIENTS_INSTALL:-1} == 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	log "installing Debian's awscli for $AWS_CLI_V2"
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq awscli; } >"$WORK/apt.log" 2>&1 ||
		{ cat "$WORK/apt.log" >&2 && exit 1; }
fi
if [[ ! -x $AWS_CLI_V2 ]] || [[ $("$AWS_CLI_V2" --version 2>&1) != aws-cli/2.* ]]; then
	echo "AWS CLI v2 is needed at $AWS_CLI_V2 (apt-get install awscli)" >&2
	exit 1
fi
if ! "$PYTHON" -c 'import boto3' 2>/dev/null; then
	echo "$PYTHON has no boto3" >&2
	exit 1
fi
# AWS CLI v1 is optional: the `aws` on PATH when it is v1 (pyenv's), unless AWS_CLI_V1 names one or is empty.
if [[ -z ${AWS_CLI_V1+set} ]]; then
	AWS_CLI_V1=$(command -v aws || true)
fi
if [[ -n $AWS_CLI_V1 && $("$AWS_CLI_V1" --version 2>&1) != aws-cli/1.* ]]; then
	AWS_CLI_V1=""
fi

if [[ -z ${FAKECLOUD_BIN:-} ]]; then
	log "building fakecloud"
	FAKECLOUD_BIN=$WORK/fakecloud
	(cd "$REPO" && go build -o "$FAKECLOUD_BIN" ./cmd/fakecloud)
fi

log "backend $BACKEND; $("$AWS_CLI_V2" --version 2>&1 | cut -d' ' -f1,2)${AWS_CLI_V1:+; $("$AWS_CLI_V1" --version 2>&1 | cut -d' ' -f1,4)}; boto3 $("$PYTHON" -c 'import boto3; print(boto3.__version__)')"

run_client "aws-cli-v2" env AWS_CLI="$AWS_CLI_V2" bash "$HERE/cli.sh"
if [[ -n $AWS_CLI_V1 ]]; then
	run_client "aws-cli-v1" env AWS_CLI="$AWS_CLI_V1" bash "$HERE/cli.sh"
fi
run_client "boto3" "$PYTHON" "$HERE/boto3_lifecycle.py"
run_client "boto3-snapshots" "$PYTHON" "$HERE/boto3_snapshots.py"
run_client "boto3-answers" "$PYTHON" "$HERE/boto3_answers.py"
run_client "boto3-instances" "$PYTHON" "$HERE/boto3_instances.py"

echo
passed=0 failed=0
for line in "${SUMMARY[@]}"; do
	echo "$line"
	if [[ $line == PASS* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "clients: $passed passed, $failed failed"
if ((FAILED)); then
	echo "FAIL: fakecloud client compatibility (backend $BACKEND)"
	exit 1
fi
echo "PASS: fakecloud client compatibility (backend $BACKEND)"
