#!/usr/bin/env bash
# cli.sh drives one EBS volume's whole life through the AWS CLI against a running fakecloud.
#
# Usage: test/clients/cli.sh [ENDPOINT]
#
# Environment:
#   FAKECLOUD_ENDPOINT    EC2 endpoint (when no argument), e.g. http://127.0.0.1:8787
#   AWS_CLI               the aws binary to use (default /usr/bin/aws, Debian's AWS CLI v2)
#   FAKECLOUD_INSTANCE_A  an instance in one zone (default i-0123456789abcdef0)
#   FAKECLOUD_INSTANCE_B  an instance in another zone (default i-0fedcba9876543210)
#   FAKECLOUD_BACKEND     loop or file: what backs attachments' hostDevice, checked through /admin/volumes
#                         (unset: the host-side checks are skipped)
#   POLL_TIMEOUT          seconds any single wait may take (default 30)
#   CLI_EXTRA_ERRORS      1 to also check error paths that boto3_lifecycle.py covers already (slower)
#
# It expects a fakecloud with no volumes and leaves it with none; it stops, starts and at last terminates
# FAKECLOUD_INSTANCE_B. Exits non-zero on the first failed check.
set -euo pipefail

ENDPOINT=${1:-${FAKECLOUD_ENDPOINT:-}}
if [[ -z $ENDPOINT ]]; then
	echo "usage: $0 ENDPOINT (or set FAKECLOUD_ENDPOINT)" >&2
	exit 2
fi
AWS_CLI=${AWS_CLI:-/usr/bin/aws}
INSTANCE_A=${FAKECLOUD_INSTANCE_A:-i-0123456789abcdef0}
INSTANCE_B=${FAKECLOUD_INSTANCE_B:-i-0fedcba9876543210}
BACKEND=${FAKECLOUD_BACKEND:-}
POLL_TIMEOUT=${POLL_TIMEOUT:-30}
GIB=$((1 << 30))

# Dummy credentials and a configuration that nothing on this machine can leak into.
export AWS_ACCESS_KEY_ID=AKIAFAKECLOUDTEST000 AWS_SECRET_ACCESS_KEY=fakecloud-secret-key
export AWS_DEFAULT_REGION=us-east-1 AWS_PAGER="" AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_EC2 AWS_CA_BUNDLE

STDERR_FILE=$(mktemp)
trap 'rm -f "$STDERR_FILE" "$STDERR_FILE".*' EXIT

STEP=""
step() {
	STEP=$*
	printf '[cli] %3ds %s\n' "$SECONDS" "$STEP"
}
fail() {
	printf '[cli] FAIL (%s): %s\n' "$STEP" "$*" >&2
	exit 1
}

# Service errors exit 254 in CLI v2 and 255 in CLI v1.
case $("$AWS_CLI" --version 2>&1) in
aws-cli/2.*) SERVICE_ERROR_RC=254 ;;
aws-cli/1.*) SERVICE_ERROR_RC=255 ;;
*) echo "[cli] $AWS_CLI is not the AWS CLI: $("$AWS_CLI" --version 2>&1)" >&2 && exit 1 ;;
esac

# ec2 runs one EC2 command and prints its output; a non-zero exit fails the run with the CLI's error.
ec2() {
	local out rc=0
	out=$("$AWS_CLI" --endpoint-url "$ENDPOINT" ec2 "$@" 2>"$STDERR_FILE") || rc=$?
	if ((rc != 0)); then
		fail "aws ec2 $* exited $rc: $(cat "$STDERR_FILE")"
	fi
	printf '%s\n' "$out"
}

# ec2_concurrently "ARGS"... runs several EC2 commands at once (each a word-split string without spaces inside
# arguments), failing the run if any fails.
ec2_concurrently() {
	local i cmds=("$@") pids=()
	for i in "${!cmds[@]}"; do
		# shellcheck disable=SC2086 # each command is a word list by design
		"$AWS_CLI" --endpoint-url "$ENDPOINT" ec2 ${cmds[$i]} >/dev/null 2>"$STDERR_FILE.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "concurrent aws ec2 ${cmds[$i]}: $(cat "$STDERR_FILE.$i")"
	done
}

# expect_error CODE ARGS... runs an EC2 command that must fail with the service error CODE.
expect_error() {
	local code=$1 rc=0
	shift
	"$AWS_CLI" --endpoint-url "$ENDPOINT" ec2 "$@" >/dev/null 2>"$STDERR_FILE" || rc=$?
	if ((rc == 0)); then
		fail "aws ec2 $* succeeded; want error $code"
	fi
	if ((rc != SERVICE_ERROR_RC)); then
		fail "aws ec2 $* exited $rc, want $SERVICE_ERROR_RC (service error $code): $(cat "$STDERR_FILE")"
	fi
	if ! grep -qF "($code)" "$STDERR_FILE"; then
		fail "aws ec2 $* failed without ($code): $(cat "$STDERR_FILE")"
	fi
	printf '[cli]   got %s as expected\n' "$code"
}

expect_eq() {
	local what=$1 got=$2 want=$3
	[[ $got == "$want" ]] || fail "$what: got '$got', want '$want'"
}

# poll WANT_REGEX ARGS... repeats an EC2 query until its output matches WANT_REGEX or POLL_TIMEOUT passes.
poll() {
	local want=$1 got deadline=$((SECONDS + POLL_TIMEOUT))
	shift
	while true; do
		got=$(ec2 "$@")
		if [[ $got =~ $want ]]; then
			printf '%s' "$got"
			return 0
		fi
		((SECONDS < deadline)) || fail "waited ${POLL_TIMEOUT}s for aws ec2 $* to match /$want/; last output: '$got'"
		sleep 0.2
	done
}

# describe_volumes_calls prints how many successful DescribeVolumes requests fakecloud has served (GET /metrics).
describe_volumes_calls() {
	curl -fsS "$ENDPOINT/metrics" | awk '/^diskforge_fakecloud_requests_total\{/ && /action="DescribeVolumes"/ && /code="Success"/ { n += $NF } END { print n + 0 }'
}

# words prints its arguments sorted, one line, so ID lists compare regardless of order.
words() { tr -s ' \t\n' '\n' <<<"$*" | sed '/^$/d' | sort | tr '\n' ' '; }

# admin_host_device VOLUME prints the hostDevice of the volume's first attachment from GET /admin/volumes.
admin_host_device() {
	curl -fsS "$ENDPOINT/admin/volumes" | python3 -c '
import json, sys
vid = sys.argv[1]
for v in json.load(sys.stdin) or []:
    if v.get("id") == vid:
        for a in v.get("attachments") or []:
            print(a.get("hostDevice", ""))
            break
' "$1"
}

# check_host_size VOLUME GIB checks, through the backend's own view, that the attached volume has that size.
check_host_size() {
	local vol=$1 want=$(($2 * GIB)) dev size
	[[ -n $BACKEND ]] || return 0
	dev=$(admin_host_device "$vol")
	[[ -n $dev ]] || fail "GET /admin/volumes gives $vol no hostDevice"
	case $BACKEND in
	loop)
		[[ $dev == /dev/loop* && -b $dev ]] || fail "hostDevice '$dev' of $vol is not a loop block device"
		size=$(blockdev --getsize64 "$dev")
		;;
	file)
		[[ -f $dev ]] || fail "hostDevice '$dev' of $vol is not a regular file"
		size=$(stat -c %s "$dev")
		;;
	*) fail "unknown FAKECLOUD_BACKEND '$BACKEND'" ;;
	esac
	expect_eq "size of $dev ($vol)" "$size" "$want"
	printf '[cli]   %s is %s, %s bytes\n' "$vol" "$dev" "$size"
	HOST_DEVICE=$dev
}

echo "[cli] $("$AWS_CLI" --version 2>&1) against $ENDPOINT"
# Each CLI process costs most of a second, so checks are folded into few calls with --query.

step "describe-availability-zones"
zones=$(ec2 describe-availability-zones --query 'AvailabilityZones[].[ZoneName,State,RegionName]' --output text)
grep -qx 'us-east-1a	available	us-east-1' <<<"$zones" || fail "zones: '$zones'"
grep -qx 'us-east-1b	available	us-east-1' <<<"$zones" || fail "zones: '$zones'"

step "describe-instances (placement)"
placement=$(ec2 describe-instances --instance-ids "$INSTANCE_A" "$INSTANCE_B" \
	--query 'Reservations[].Instances[].[InstanceId,Placement.AvailabilityZone,State.Name]' --output text)
ZONE_A=$(awk -v i="$INSTANCE_A" '$1 == i && $3 == "running" { print $2 }' <<<"$placement")
ZONE_B=$(awk -v i="$INSTANCE_B" '$1 == i && $3 == "running" { print $2 }' <<<"$placement")
[[ -n $ZONE_A && -n $ZONE_B && $ZONE_A != "$ZONE_B" ]] || fail "instances not running in two zones: '$placement'"
echo "[cli]   $INSTANCE_A in $ZONE_A, $INSTANCE_B in $ZONE_B"

step "create-volume --dry-run"
expect_error DryRunOperation create-volume --dry-run --availability-zone "$ZONE_A" --size 10 --volume-type gp3
expect_eq "volumes at start and after the dry run" "$(ec2 describe-volumes --query 'length(Volumes)' --output text)" 0

step "create-volume gp3 10 GiB with tags and a client token"
TOKEN="cli-$$-$RANDOM"
create_main=(create-volume --availability-zone "$ZONE_A" --size 10 --volume-type gp3 --client-token "$TOKEN"
	--tag-specifications 'ResourceType=volume,Tags=[{Key=Name,Value=cli-main},{Key=suite,Value=clients}]')
read -r VOL size vtype iops throughput < <(ec2 "${create_main[@]}" --query '[VolumeId,Size,VolumeType,Iops,Throughput]' --output text)
[[ $VOL == vol-* ]] || fail "VolumeId '$VOL'"
expect_eq "size, type, iops, throughput" "$size $vtype $iops $throughput" "10 gp3 3000 125"
echo "[cli]   created $VOL"

step "create-volume again with the same client token"
expect_eq "VolumeId of the retried create" "$(ec2 "${create_main[@]}" --query VolumeId --output text)" "$VOL"
expect_error IdempotentParameterMismatch create-volume --availability-zone "$ZONE_A" --size 11 --volume-type gp3 --client-token "$TOKEN"

step "wait until available"
# Every volume: exactly one, available, with its tags.
poll "^$VOL	available	Name=cli-main,suite=clients\$" describe-volumes \
	--query "Volumes[].[VolumeId,State,join(',',sort_by(Tags,&Key)[].join('=',[Key,Value]))]" --output text >/dev/null
# The waiter checks before it first sleeps, so on an available volume it returns at once.
timeout 20 "$AWS_CLI" --endpoint-url "$ENDPOINT" ec2 wait volume-available --volume-ids "$VOL" || fail "aws ec2 wait volume-available"

step "attach-volume to $INSTANCE_A as /dev/xvdba"
astate=$(ec2 attach-volume --volume-id "$VOL" --instance-id "$INSTANCE_A" --device /dev/xvdba --query State --output text)
[[ $astate == attaching || $astate == attached ]] || fail "attach-volume state '$astate'"
poll "^in-use	attached	$INSTANCE_A	/dev/xvdba\$" describe-volumes --volume-ids "$VOL" \
	--query 'Volumes[0].[State,Attachments[0].State,Attachments[0].InstanceId,Attachments[0].Device]' --output text >/dev/null
bdm=$(ec2 describe-instances --instance-ids "$INSTANCE_A" \
	--query "Reservations[0].Instances[0].BlockDeviceMappings[?Ebs.VolumeId=='$VOL'].[DeviceName,Ebs.Status]" --output text)
expect_eq "describe-instances block device mapping" "$bdm" "/dev/xvdba	attached"
HOST_DEVICE=""
check_host_size "$VOL" 10
ATTACHED_DEVICE=$HOST_DEVICE

step "modify-volume to 20 GiB"
mstate=$(ec2 modify-volume --volume-id "$VOL" --size 20 --query VolumeModification.ModificationState --output text)
expect_eq "modification state" "$mstate" modifying
poll '^(optimizing|completed)	10	20$' describe-volumes-modifications --volume-ids "$VOL" \
	--query 'VolumesModifications[0].[ModificationState,OriginalSize,TargetSize]' --output text >/dev/null
expect_eq "size after modification" "$(ec2 describe-volumes --volume-ids "$VOL" --query 'Volumes[0].Size' --output text)" 20
check_host_size "$VOL" 20
if [[ $BACKEND == loop ]]; then
	expect_eq "loop device after resize" "$HOST_DEVICE" "$ATTACHED_DEVICE"
fi

step "create-snapshot"
SNAP=$(ec2 create-snapshot --volume-id "$VOL" --description "cli lifecycle" \
	--tag-specifications 'ResourceType=snapshot,Tags=[{Key=suite,Value=clients}]' --query SnapshotId --output text)
[[ $SNAP == snap-* ]] || fail "SnapshotId '$SNAP'"
# --owner-ids self lists it too.
poll "^$SNAP	completed	20	$VOL	100%\$" describe-snapshots --owner-ids self \
	--query 'Snapshots[].[SnapshotId,State,VolumeSize,VolumeId,Progress]' --output text >/dev/null

step "create-volume from the snapshot"
VOL2=$(ec2 create-volume --availability-zone "$ZONE_A" --snapshot-id "$SNAP" --volume-type gp3 --query VolumeId --output text)
poll "^available	20	$SNAP\$" describe-volumes --volume-ids "$VOL2" --query 'Volumes[0].[State,Size,SnapshotId]' --output text >/dev/null

step "create-tags / delete-tags"
expect_eq "output of create-tags" "$(ec2 create-tags --resources "$VOL" "$VOL2" --tags Key=env,Value=test Key=owner,Value=cli)" ""
got=$(ec2 describe-volumes --filters Name=tag:env,Values=test --query 'Volumes[].VolumeId' --output text)
expect_eq "tag:env=test" "$(words "$got")" "$(words "$VOL" "$VOL2")"
expect_eq "output of delete-tags" "$(ec2 delete-tags --resources "$VOL2" --tags Key=env)" ""
got=$(ec2 describe-volumes --filters Name=tag:env,Values=test Name=tag-key,Values=owner --query 'Volumes[].VolumeId' --output text)
expect_eq "tag:env=test and tag-key=owner after delete-tags" "$got" "$VOL"

step "describe-volumes filters"
got=$(ec2 describe-volumes --filters Name=status,Values=in-use --query 'Volumes[].VolumeId' --output text)
expect_eq "status=in-use" "$got" "$VOL"
got=$(ec2 describe-volumes --filters Name=status,Values=available --query 'Volumes[].VolumeId' --output text)
expect_eq "status=available" "$got" "$VOL2"
got=$(ec2 describe-volumes --filters "Name=attachment.instance-id,Values=$INSTANCE_A,$INSTANCE_B" --query 'Volumes[].VolumeId' --output text)
expect_eq "attachment.instance-id" "$got" "$VOL"

step "pagination over 12 volumes"
# Ten more volumes, created by concurrent CLI processes to save time.
create_page=()
for i in $(seq 1 10); do
	create_page+=("create-volume --availability-zone $ZONE_B --size 1 --volume-type gp3 --tag-specifications ResourceType=volume,Tags=[{Key=batch,Value=page},{Key=Name,Value=page-$i}]")
done
ec2_concurrently "${create_page[@]}"
poll '^0$' describe-volumes --filters Name=status,Values=creating --query 'length(Volumes)' --output text >/dev/null
# The CLI pages by itself with --page-size (sent as MaxResults): three DescribeVolumes calls, all 12 volumes.
before=$(describe_volumes_calls)
all=$(ec2 describe-volumes --page-size 5 --query 'Volumes[].VolumeId' --output text)
expect_eq "DescribeVolumes calls for --page-size 5" "$(($(describe_volumes_calls) - before))" 3
read -r -a ALL_VOLS <<<"$(words "$all")"
expect_eq "distinct volumes listed with --page-size 5" "${#ALL_VOLS[@]}" 12
[[ " ${ALL_VOLS[*]} " == *" $VOL "* && " ${ALL_VOLS[*]} " == *" $VOL2 "* ]] || fail "$VOL or $VOL2 missing from '${ALL_VOLS[*]}'"
# An explicit --max-results is the service's own pagination argument, so the CLI (v1 and v2 alike: awscli's
# customizations/paginate.py check_should_enable_pagination) does not follow NextToken then; --no-paginate
# makes that explicit. Walk the pages by hand with --next-token.
read -r token seen < <(ec2 describe-volumes --no-paginate --max-results 5 --query "[NextToken,join(' ',Volumes[].VolumeId)]" --output text)
[[ -n $token && $token != None ]] || fail "no NextToken on the first page"
expect_eq "first page size" "$(wc -w <<<"$seen")" 5
pages=1
while [[ $token != None ]]; do
	read -r token page < <(ec2 describe-volumes --no-paginate --max-results 5 --next-token "$token" \
		--query "[NextToken,join(' ',Volumes[].VolumeId)]" --output text)
	seen="$seen $page"
	pages=$((pages + 1))
	((pages <= 5)) || fail "more than 5 pages of 5 for 12 volumes"
done
expect_eq "pages" "$pages" 3
expect_eq "volumes walked by NextToken" "$(words "$seen")" "$(words "${ALL_VOLS[@]}")"
expect_error InvalidParameterValue describe-volumes --no-paginate --max-results 4

step "error paths"
expect_error InvalidVolume.ZoneMismatch attach-volume --volume-id "$VOL2" --instance-id "$INSTANCE_B" --device /dev/xvdbb
expect_error VolumeInUse delete-volume --volume-id "$VOL"
expect_error InvalidVolume.NotFound describe-volumes --volume-ids vol-0badc0ffee0000000
if [[ ${CLI_EXTRA_ERRORS:-0} == 1 ]]; then
	expect_error InvalidVolumeID.Malformed describe-volumes --volume-ids not-a-volume
	expect_error InvalidInstanceID.NotFound attach-volume --volume-id "$VOL2" --instance-id i-0badc0ffee0000000 --device /dev/xvdbb
	expect_error DryRunOperation attach-volume --dry-run --volume-id "$VOL2" --instance-id "$INSTANCE_A" --device /dev/xvdbb
	expect_error InvalidSnapshot.NotFound create-volume --availability-zone "$ZONE_A" --snapshot-id snap-0badc0ffee0000000
fi

step "detach-volume"
dstate=$(ec2 detach-volume --volume-id "$VOL" --query State --output text)
[[ $dstate == detaching || $dstate == detached ]] || fail "detach-volume state '$dstate'"
poll '^0	available$' describe-volumes --volume-ids "$VOL" --query 'Volumes[0].[length(Attachments),State]' --output text >/dev/null
if [[ $BACKEND == loop ]]; then
	backing=$(cat "/sys/block/${ATTACHED_DEVICE#/dev/}/loop/backing_file" 2>/dev/null || true)
	[[ $backing != *"$VOL"* ]] || fail "$ATTACHED_DEVICE still backs $VOL after detach: $backing"
	echo "[cli]   $ATTACHED_DEVICE released"
fi
bdm=$(ec2 describe-instances --instance-ids "$INSTANCE_A" --query 'length(Reservations[0].Instances[0].BlockDeviceMappings)' --output text)
expect_eq "block device mappings after detach" "$bdm" 0

step "delete everything"
# DeleteVolume and DeleteSnapshot have no output members, so the CLI prints nothing on success.
expect_eq "output of delete-volume $VOL" "$(ec2 delete-volume --volume-id "$VOL")" ""
deletes=()
for v in "${ALL_VOLS[@]}"; do
	[[ $v == "$VOL" ]] || deletes+=("delete-volume --volume-id $v")
done
ec2_concurrently "${deletes[@]}"
expect_eq "output of delete-snapshot" "$(ec2 delete-snapshot --snapshot-id "$SNAP")" ""
expect_eq "snapshots left" "$(ec2 describe-snapshots --owner-ids self --query 'length(Snapshots)' --output text)" 0
poll '^0$' describe-volumes --query 'length(Volumes)' --output text >/dev/null
expect_error InvalidVolume.NotFound describe-volumes --volume-ids "$VOL"

step "stop-instances / start-instances"
got=$(ec2 stop-instances --instance-ids "$INSTANCE_B" \
	--query 'StoppingInstances[0].[InstanceId,PreviousState.Name,PreviousState.Code,CurrentState.Name,CurrentState.Code]' --output text)
expect_eq "stop-instances" "$got" "$INSTANCE_B	running	16	stopping	64"
poll '^stopped	80$' describe-instances --instance-ids "$INSTANCE_B" \
	--query 'Reservations[0].Instances[0].[State.Name,State.Code]' --output text >/dev/null
expect_eq "instance-state-name=stopped" "$(ec2 describe-instances --filters Name=instance-state-name,Values=stopped \
	--query 'Reservations[].Instances[].InstanceId' --output text)" "$INSTANCE_B"
got=$(ec2 stop-instances --force --instance-ids "$INSTANCE_B" --query 'StoppingInstances[0].[PreviousState.Name,CurrentState.Name]' --output text)
expect_eq "stop-instances --force of a stopped instance" "$got" "stopped	stopped"
VOL3=$(ec2 create-volume --availability-zone "$ZONE_B" --size 1 --volume-type gp3 --query VolumeId --output text)
poll '^available$' describe-volumes --volume-ids "$VOL3" --query 'Volumes[0].State' --output text >/dev/null
ec2 attach-volume --volume-id "$VOL3" --instance-id "$INSTANCE_B" --device /dev/xvdba >/dev/null
poll '^in-use	attached$' describe-volumes --volume-ids "$VOL3" --query 'Volumes[0].[State,Attachments[0].State]' --output text >/dev/null
echo "[cli]   $VOL3 attached to the stopped $INSTANCE_B"
got=$(ec2 start-instances --instance-ids "$INSTANCE_B" --query 'StartingInstances[0].[PreviousState.Name,CurrentState.Name,CurrentState.Code]' --output text)
expect_eq "start-instances" "$got" "stopped	pending	0"
poll '^running	16$' describe-instances --instance-ids "$INSTANCE_B" \
	--query 'Reservations[0].Instances[0].[State.Name,State.Code]' --output text >/dev/null
expect_eq "volume after the start" "$(ec2 describe-volumes --volume-ids "$VOL3" --query 'Volumes[0].Attachments[0].State' --output text)" attached

step "terminate-instances"
expect_error InvalidInstanceID.NotFound terminate-instances --instance-ids i-0badc0ffee0000000
expect_error DryRunOperation terminate-instances --dry-run --instance-ids "$INSTANCE_B"
got=$(ec2 terminate-instances --instance-ids "$INSTANCE_B" --query 'TerminatingInstances[0].[PreviousState.Name,CurrentState.Name,CurrentState.Code]' --output text)
expect_eq "terminate-instances" "$got" "running	shutting-down	32"
poll '^terminated	48$' describe-instances --instance-ids "$INSTANCE_B" \
	--query 'Reservations[0].Instances[0].[State.Name,State.Code]' --output text >/dev/null
poll '^available	0$' describe-volumes --volume-ids "$VOL3" --query 'Volumes[0].[State,length(Attachments)]' --output text >/dev/null
echo "[cli]   termination detached $VOL3"
expect_error IncorrectInstanceState start-instances --instance-ids "$INSTANCE_B"
expect_error IncorrectInstanceState attach-volume --volume-id "$VOL3" --instance-id "$INSTANCE_B" --device /dev/xvdba
expect_eq "output of delete-volume $VOL3" "$(ec2 delete-volume --volume-id "$VOL3")" ""
poll '^0$' describe-volumes --query 'length(Volumes)' --output text >/dev/null

echo "[cli] all checks passed with $("$AWS_CLI" --version 2>&1 | cut -d' ' -f1) in ${SECONDS}s"
