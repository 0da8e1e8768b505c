#!/usr/bin/env python3
"""Drive fakecloud's snapshot actions through boto3: CopySnapshot, snapshot sharing, EBS encryption by default
and the default KMS key, CreateSnapshots of an instance's volumes, snapshot storage tiers and snapshot locks.

Usage: python3 test/clients/boto3_snapshots.py [ENDPOINT]

Environment: FAKECLOUD_ENDPOINT (when no argument), FAKECLOUD_INSTANCE_A (an instance in us-east-1a),
POLL_TIMEOUT (seconds per wait, default 30). It expects a fresh fakecloud and leaves encryption by default off.
Exits non-zero on the first failed check.
"""

import os
import re
import sys

import boto3
from botocore.exceptions import ClientError

import boto3_lifecycle as lc
from boto3_lifecycle import FAST_WAITER, check, eq, expect_error, step

KEY_ARN = re.compile(r"^arn:aws:kms:us-east-1:\d{12}:key/[0-9a-f-]{36}$")
FRIEND = "111122223333"


def snapshot(ec2, sid):
    return ec2.describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]


def completed_snapshot(ec2, vid, **kwargs):
    sid = ec2.create_snapshot(VolumeId=vid, **kwargs)["SnapshotId"]
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[sid], WaiterConfig=FAST_WAITER)
    return sid


def new_volume(ec2, **kwargs):
    vid = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, **kwargs)["VolumeId"]
    ec2.get_waiter("volume_available").wait(VolumeIds=[vid], WaiterConfig=FAST_WAITER)
    return vid


def main():
    endpoint = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FAKECLOUD_ENDPOINT", "")
    if not endpoint:
        print("usage: boto3_snapshots.py ENDPOINT (or set FAKECLOUD_ENDPOINT)", file=sys.stderr)
        return 2
    inst_a = os.environ.get("FAKECLOUD_INSTANCE_A", "i-0123456789abcdef0")
    ec2 = lc.client(endpoint)

    step("encryption by default and the default KMS key")
    eq("encryption by default at first", ec2.get_ebs_encryption_by_default()["EbsEncryptionByDefault"], False)
    managed = ec2.get_ebs_default_kms_key_id()["KmsKeyId"]
    check(KEY_ARN.match(managed), f"default key {managed!r} is not a key ARN")
    expect_error("DryRunOperation", ec2.enable_ebs_encryption_by_default, status=412, DryRun=True)
    eq("enable", ec2.enable_ebs_encryption_by_default()["EbsEncryptionByDefault"], True)
    enc = ec2.describe_volumes(VolumeIds=[new_volume(ec2)])["Volumes"][0]
    eq("volume encrypted by default", (enc["Encrypted"], enc.get("KmsKeyId")), (True, managed))
    mine = ec2.modify_ebs_default_kms_key_id(KmsKeyId="1234abcd-12ab-34cd-56ef-1234567890ab")["KmsKeyId"]
    check(mine.endswith(":key/1234abcd-12ab-34cd-56ef-1234567890ab"), f"modified default key {mine!r}")
    eq("default key", ec2.get_ebs_default_kms_key_id()["KmsKeyId"], mine)
    eq("reset key", ec2.reset_ebs_default_kms_key_id()["KmsKeyId"], managed)
    eq("disable", ec2.disable_ebs_encryption_by_default()["EbsEncryptionByDefault"], False)
    eq("volume after disable", ec2.describe_volumes(VolumeIds=[new_volume(ec2)])["Volumes"][0]["Encrypted"], False)

    step("copy_snapshot")
    vol = new_volume(ec2, TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "Name", "Value": "data"}]}])
    src = completed_snapshot(ec2, vol, Description="source")
    expect_error("InvalidParameterValue", ec2.copy_snapshot, SourceSnapshotId=src, SourceRegion="eu-west-1")
    expect_error("InvalidSnapshot.NotFound", ec2.copy_snapshot, SourceSnapshotId="snap-0123456789abcdef0", SourceRegion="us-east-1")
    expect_error("InvalidParameterDependency", ec2.copy_snapshot, SourceSnapshotId=src, SourceRegion="us-east-1", KmsKeyId="alias/mine")
    expect_error("DryRunOperation", ec2.copy_snapshot, status=412, SourceSnapshotId=src, SourceRegion="us-east-1", DryRun=True)
    out = ec2.copy_snapshot(
        SourceSnapshotId=src, SourceRegion="us-east-1", Description="the copy", Encrypted=True,
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": "copy", "Value": "yes"}]}],
    )
    copy = out["SnapshotId"]
    eq("copy reply tags", out.get("Tags"), [{"Key": "copy", "Value": "yes"}])
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[copy], WaiterConfig=FAST_WAITER)
    sn = snapshot(ec2, copy)
    eq("copy", (sn["Description"], sn["Encrypted"], sn.get("KmsKeyId"), sn["VolumeSize"]), ("the copy", True, managed, 1))
    restored = new_volume(ec2, SnapshotId=copy)
    eq("volume from the copy", ec2.describe_volumes(VolumeIds=[restored])["Volumes"][0]["SnapshotId"], copy)

    step("snapshot sharing")
    ec2.modify_snapshot_attribute(SnapshotId=src, Attribute="createVolumePermission", OperationType="add", UserIds=[FRIEND])
    ec2.modify_snapshot_attribute(SnapshotId=src, CreateVolumePermission={"Add": [{"Group": "all"}]})
    perms = ec2.describe_snapshot_attribute(SnapshotId=src, Attribute="createVolumePermission")["CreateVolumePermissions"]
    eq("permissions", sorted(perms, key=str), sorted([{"UserId": FRIEND}, {"Group": "all"}], key=str))
    eq("restorable by all", [s["SnapshotId"] for s in ec2.describe_snapshots(RestorableByUserIds=["all"])["Snapshots"]], [src])
    eq("restorable by the friend", [s["SnapshotId"] for s in ec2.describe_snapshots(RestorableByUserIds=[FRIEND])["Snapshots"]], [src])
    expect_error("UnsupportedOperation", ec2.modify_snapshot_attribute, SnapshotId=copy, CreateVolumePermission={"Add": [{"Group": "all"}]})
    expect_error("InvalidParameter", ec2.modify_snapshot_attribute, SnapshotId=copy, OperationType="add", UserIds=[FRIEND])
    expect_error("InvalidParameterValue", ec2.describe_snapshot_attribute, SnapshotId=src, Attribute="size")
    eq("product codes", ec2.describe_snapshot_attribute(SnapshotId=src, Attribute="productCodes").get("ProductCodes", []), [])
    ec2.reset_snapshot_attribute(SnapshotId=src, Attribute="createVolumePermission")
    eq("after reset", ec2.describe_snapshot_attribute(SnapshotId=src, Attribute="createVolumePermission")["CreateVolumePermissions"], [])

    step("create_snapshots")
    ec2.attach_volume(VolumeId=vol, InstanceId=inst_a, Device="/dev/xvdba")
    second = new_volume(ec2)
    ec2.attach_volume(VolumeId=second, InstanceId=inst_a, Device="/dev/xvdbb")
    ec2.get_waiter("volume_in_use").wait(VolumeIds=[vol, second], WaiterConfig=FAST_WAITER)
    lc.poll("both attached", lambda: ec2.describe_volumes(VolumeIds=[vol, second])["Volumes"],
            lambda vs: all(a["State"] == "attached" for v in vs for a in v["Attachments"]))
    expect_error("InvalidInstanceID.NotFound", ec2.create_snapshots, InstanceSpecification={"InstanceId": "i-0badc0ffee0000000"})
    expect_error("DryRunOperation", ec2.create_snapshots, status=412, InstanceSpecification={"InstanceId": inst_a}, DryRun=True)
    sns = ec2.create_snapshots(
        InstanceSpecification={"InstanceId": inst_a, "ExcludeBootVolume": True}, Description="set", CopyTagsFromSource="volume",
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": "set", "Value": "1"}]}],
    )["Snapshots"]
    eq("volumes snapshotted", sorted(s["VolumeId"] for s in sns), sorted([vol, second]))
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[s["SnapshotId"] for s in sns], WaiterConfig=FAST_WAITER)
    for s in sns:
        tags = {t["Key"]: t["Value"] for t in snapshot(ec2, s["SnapshotId"]).get("Tags", [])}
        want = {"set": "1", "Name": "data"} if s["VolumeId"] == vol else {"set": "1"}
        eq(f"tags of the snapshot of {s['VolumeId']}", tags, want)
    excl = ec2.create_snapshots(InstanceSpecification={"InstanceId": inst_a, "ExcludeDataVolumeIds": [second]})["Snapshots"]
    eq("with an exclusion", [s["VolumeId"] for s in excl], [vol])

    step("snapshot storage tiers")
    cold = completed_snapshot(ec2, vol)
    tier_of = lambda: ec2.describe_snapshot_tier_status(Filters=[{"Name": "snapshot-id", "Values": [cold]}])["SnapshotTierStatuses"][0]
    in_tier = lambda tier: [x["SnapshotId"] for x in ec2.describe_snapshots(
        OwnerIds=["self"], Filters=[{"Name": "storage-tier", "Values": [tier]}])["Snapshots"] if x["SnapshotId"] == cold]
    expect_error("IncorrectState", ec2.restore_snapshot_tier, SnapshotId=cold, PermanentRestore=True)
    ec2.modify_snapshot_tier(SnapshotId=cold, StorageTier="archive")
    lc.poll("archival", tier_of, lambda st: st["StorageTier"] == "archive")
    eq("archived snapshot's tier", snapshot(ec2, cold)["StorageTier"], "archive")
    eq("storage-tier=archive", in_tier("archive"), [cold])
    expect_error("IncorrectState", ec2.create_volume, AvailabilityZone="us-east-1a", SnapshotId=cold)
    restored = ec2.restore_snapshot_tier(SnapshotId=cold, TemporaryRestoreDays=1)
    eq("temporary restore", (restored["RestoreDuration"], restored["IsPermanentRestore"]), (1, False))
    check("RestoreExpiryTime" in snapshot(ec2, cold), "a temporarily restored snapshot shows no restoreExpiryTime")
    eq("storage-tier=standard after the restore", in_tier("standard"), [cold])
    new_volume(ec2, SnapshotId=cold)

    step("lock_snapshot")
    expect_error("InvalidParameterCombination", ec2.lock_snapshot, SnapshotId=copy, LockMode="governance", LockDuration=1, CoolOffPeriod=1)
    lock = ec2.lock_snapshot(SnapshotId=copy, LockMode="compliance", LockDuration=1, CoolOffPeriod=1)
    eq("lock state", (lock["LockState"], lock["LockDuration"], lock["CoolOffPeriod"]), ("compliance-cooloff", 1, 1))
    expect_error("IncorrectState", ec2.delete_snapshot, SnapshotId=copy)
    locked = ec2.describe_locked_snapshots(Filters=[{"Name": "lock-state", "Values": ["compliance-cooloff"]}])["Snapshots"]
    eq("locked snapshots", [x["SnapshotId"] for x in locked], [copy])
    eq("unlock", ec2.unlock_snapshot(SnapshotId=copy)["SnapshotId"], copy)
    eq("locked after unlock", ec2.describe_locked_snapshots()["Snapshots"], [])
    ec2.delete_snapshot(SnapshotId=copy)

    print(f"[boto3] all snapshot checks passed with boto3 {boto3.__version__}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except lc.CheckFailed as e:
        print(f"[boto3] FAIL ({lc.STEP}): {e}", file=sys.stderr)
        sys.exit(1)
    except ClientError as e:
        print(f"[boto3] FAIL ({lc.STEP}): unexpected {e.response['Error']['Code']}: {e}", file=sys.stderr)
        sys.exit(1)
