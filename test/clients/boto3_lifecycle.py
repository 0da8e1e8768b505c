#!/usr/bin/env python3
"""Drive one EBS volume's whole life through boto3 against a running fakecloud.

Usage: python3 test/clients/boto3_lifecycle.py [ENDPOINT]

Environment: FAKECLOUD_ENDPOINT (when no argument), FAKECLOUD_INSTANCE_A / FAKECLOUD_INSTANCE_B (instances in
two different zones), FAKECLOUD_BACKEND (loop or file: check attachments' hostDevice via /admin/volumes; unset
skips host-side checks), POLL_TIMEOUT (seconds per wait, default 30).

It expects a fakecloud with no volumes and leaves it with none; it stops, starts and at last terminates
FAKECLOUD_INSTANCE_B. Exits non-zero on the first failed check.
"""

import json
import os
import stat
import sys
import time
import urllib.request
import uuid

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

GIB = 1 << 30
POLL_TIMEOUT = float(os.environ.get("POLL_TIMEOUT", "30"))
FAST_WAITER = {"Delay": 0.2, "MaxAttempts": int(POLL_TIMEOUT / 0.2)}

STEP = ""


class CheckFailed(Exception):
    pass


def step(name):
    global STEP
    STEP = name
    print(f"[boto3] {name}", flush=True)


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def eq(what, got, want):
    check(got == want, f"{what}: got {got!r}, want {want!r}")


def poll(what, fn, done):
    """Call fn until done(result) holds or POLL_TIMEOUT passes; return the result."""
    deadline = time.monotonic() + POLL_TIMEOUT
    while True:
        got = fn()
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise CheckFailed(f"waited {POLL_TIMEOUT:.0f}s for {what}; last: {got!r}")
        time.sleep(0.2)


def expect_error(code, fn, status=400, **kwargs):
    """Call fn(**kwargs), which must fail with the EC2 error code (and HTTP status)."""
    try:
        fn(**kwargs)
    except ClientError as e:
        got = e.response["Error"]["Code"]
        eq(f"error code of {fn.__name__}", got, code)
        eq(f"HTTP status of {code}", e.response["ResponseMetadata"]["HTTPStatusCode"], status)
        check(e.response["ResponseMetadata"].get("RequestId"), f"{code} carries no RequestId")
        print(f"[boto3]   got {code} as expected", flush=True)
        return e
    raise CheckFailed(f"{fn.__name__}({kwargs}) succeeded; want {code}")


def volume(ec2, vid):
    vols = ec2.describe_volumes(VolumeIds=[vid])["Volumes"]
    eq(f"volumes described for {vid}", len(vols), 1)
    return vols[0]


def all_volume_ids(ec2):
    return sorted(v["VolumeId"] for p in ec2.get_paginator("describe_volumes").paginate() for v in p["Volumes"])


def admin_host_device(endpoint, vid):
    with urllib.request.urlopen(f"{endpoint}/admin/volumes", timeout=10) as r:
        vols = json.load(r) or []
    for v in vols:
        if v.get("id") == vid:
            for a in v.get("attachments") or []:
                return a.get("hostDevice", "")
    return ""


def host_size(endpoint, backend, vid):
    """Size in bytes of the volume's host device (loop: the block device; file: the backing file)."""
    dev = admin_host_device(endpoint, vid)
    check(dev, f"GET /admin/volumes gives {vid} no hostDevice")
    mode = os.stat(dev).st_mode
    if backend == "loop":
        check(dev.startswith("/dev/loop") and stat.S_ISBLK(mode), f"hostDevice {dev} is not a loop block device")
        with open(dev, "rb") as f:
            size = f.seek(0, os.SEEK_END)
    elif backend == "file":
        check(stat.S_ISREG(mode), f"hostDevice {dev} is not a regular file")
        size = os.path.getsize(dev)
    else:
        raise CheckFailed(f"unknown FAKECLOUD_BACKEND {backend!r}")
    print(f"[boto3]   {vid} is {dev}, {size} bytes", flush=True)
    return dev, size


def client(endpoint):
    """An EC2 client of fakecloud at endpoint, in us-east-1, with any credentials."""
    session = boto3.session.Session(
        aws_access_key_id="AKIAFAKECLOUDTEST000", aws_secret_access_key="fakecloud-secret-key", region_name="us-east-1"
    )
    ec2 = session.client(
        "ec2", endpoint_url=endpoint, config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)
    )
    print(f"[boto3] boto3 {boto3.__version__}, botocore {botocore.__version__} against {endpoint}", flush=True)
    return ec2


def main():
    endpoint = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FAKECLOUD_ENDPOINT", "")
    if not endpoint:
        print("usage: boto3_lifecycle.py ENDPOINT (or set FAKECLOUD_ENDPOINT)", file=sys.stderr)
        return 2
    inst_a = os.environ.get("FAKECLOUD_INSTANCE_A", "i-0123456789abcdef0")
    inst_b = os.environ.get("FAKECLOUD_INSTANCE_B", "i-0fedcba9876543210")
    backend = os.environ.get("FAKECLOUD_BACKEND", "")

    ec2 = client(endpoint)

    step("describe_availability_zones")
    zones = {z["ZoneName"]: z for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    check({"us-east-1a", "us-east-1b"} <= zones.keys(), f"zones {sorted(zones)}")
    eq("us-east-1a state", zones["us-east-1a"]["State"], "available")

    step("describe_instances (placement)")
    resv = ec2.describe_instances(InstanceIds=[inst_a, inst_b])["Reservations"]
    placement = {i["InstanceId"]: i["Placement"]["AvailabilityZone"] for r in resv for i in r["Instances"]}
    zone_a, zone_b = placement[inst_a], placement[inst_b]
    check(zone_a != zone_b, f"both instances are in {zone_a}")

    step("no volumes to start with")
    eq("volumes at start", all_volume_ids(ec2), [])

    step("create_volume DryRun")
    expect_error("DryRunOperation", ec2.create_volume, status=412, DryRun=True, AvailabilityZone=zone_a, Size=10, VolumeType="gp3")
    eq("volumes after dry run", all_volume_ids(ec2), [])

    step("create_volume gp3 10 GiB with tags and a client token")
    token = f"boto3-{uuid.uuid4()}"
    create = dict(
        AvailabilityZone=zone_a, Size=10, VolumeType="gp3", ClientToken=token,
        TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "Name", "Value": "boto3-main"}, {"Key": "suite", "Value": "clients"}]}],
    )
    v = ec2.create_volume(**create)
    vol = v["VolumeId"]
    check(vol.startswith("vol-"), f"VolumeId {vol}")
    eq("size", v["Size"], 10)
    eq("type", v["VolumeType"], "gp3")
    eq("gp3 default iops", v.get("Iops"), 3000)
    eq("gp3 default throughput", v.get("Throughput"), 125)
    check(v["State"] in ("creating", "available"), f"state {v['State']}")
    check(hasattr(v["CreateTime"], "year"), f"CreateTime {v['CreateTime']!r} is not parsed as a datetime")

    step("create_volume again with the same client token")
    eq("VolumeId of the retried create", ec2.create_volume(**create)["VolumeId"], vol)
    eq("volumes after the retry", all_volume_ids(ec2), [vol])
    expect_error("IdempotentParameterMismatch", ec2.create_volume, AvailabilityZone=zone_a, Size=11, VolumeType="gp3", ClientToken=token)

    step("wait until available (volume_available waiter)")
    ec2.get_waiter("volume_available").wait(VolumeIds=[vol], WaiterConfig=FAST_WAITER)
    v = volume(ec2, vol)
    eq("state", v["State"], "available")
    eq("tags", sorted((t["Key"], t["Value"]) for t in v.get("Tags", [])), [("Name", "boto3-main"), ("suite", "clients")])
    eq("attachments of an unattached volume", v.get("Attachments"), [])

    step(f"attach_volume to {inst_a} as /dev/xvdba")
    a = ec2.attach_volume(VolumeId=vol, InstanceId=inst_a, Device="/dev/xvdba")
    check(a["State"] in ("attaching", "attached"), f"attach state {a['State']}")
    eq("attach device", a["Device"], "/dev/xvdba")
    poll("attachment attached", lambda: volume(ec2, vol), lambda v: v["State"] == "in-use" and [x["State"] for x in v["Attachments"]] == ["attached"])
    ec2.get_waiter("volume_in_use").wait(VolumeIds=[vol], WaiterConfig=FAST_WAITER)
    att = volume(ec2, vol)["Attachments"][0]
    eq("attachment instance", att["InstanceId"], inst_a)
    eq("attachment device", att["Device"], "/dev/xvdba")

    step("describe_instances shows the attached volume")
    inst = ec2.describe_instances(InstanceIds=[inst_a])["Reservations"][0]["Instances"][0]
    bdm = [m for m in inst.get("BlockDeviceMappings", []) if m.get("Ebs", {}).get("VolumeId") == vol]
    eq("block device mappings for the volume", len(bdm), 1)
    eq("mapping device", bdm[0]["DeviceName"], "/dev/xvdba")
    eq("mapping status", bdm[0]["Ebs"]["Status"], "attached")
    check(hasattr(bdm[0]["Ebs"]["AttachTime"], "year"), "Ebs.AttachTime is not a datetime")
    eq("instance state", inst["State"]["Name"], "running")
    attached_dev = None
    if backend:
        attached_dev, size = host_size(endpoint, backend, vol)
        eq("host size", size, 10 * GIB)

    step("modify_volume to 20 GiB")
    m = ec2.modify_volume(VolumeId=vol, Size=20)["VolumeModification"]
    eq("modification state", m["ModificationState"], "modifying")
    eq("modification target", (m["OriginalSize"], m["TargetSize"]), (10, 20))
    poll(
        "modification optimizing or completed",
        lambda: ec2.describe_volumes_modifications(VolumeIds=[vol])["VolumesModifications"][0]["ModificationState"],
        lambda s: s in ("optimizing", "completed"),
    )
    eq("size after modification", volume(ec2, vol)["Size"], 20)
    if backend:
        dev, size = host_size(endpoint, backend, vol)
        eq("host size after modification", size, 20 * GIB)
        if backend == "loop":
            eq("loop device after resize", dev, attached_dev)
    mods = ec2.describe_volumes_modifications(Filters=[{"Name": "volume-id", "Values": [vol]}])["VolumesModifications"]
    eq("modifications filtered by volume-id", [x["VolumeId"] for x in mods], [vol])

    step("create_snapshot (snapshot_completed waiter)")
    sn = ec2.create_snapshot(
        VolumeId=vol, Description="boto3 lifecycle", TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": "suite", "Value": "clients"}]}]
    )
    snap = sn["SnapshotId"]
    check(snap.startswith("snap-"), f"SnapshotId {snap}")
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[snap], WaiterConfig=FAST_WAITER)
    s = ec2.describe_snapshots(SnapshotIds=[snap])["Snapshots"][0]
    eq("snapshot", (s["State"], s["VolumeSize"], s["VolumeId"], s["Progress"]), ("completed", 20, vol, "100%"))
    owned = [x["SnapshotId"] for x in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]]
    eq("describe_snapshots(OwnerIds=['self'])", owned, [snap])

    step("create_volume from the snapshot")
    vol2 = ec2.create_volume(AvailabilityZone=zone_a, SnapshotId=snap, VolumeType="gp3")["VolumeId"]
    ec2.get_waiter("volume_available").wait(VolumeIds=[vol2], WaiterConfig=FAST_WAITER)
    v2 = volume(ec2, vol2)
    eq("restored volume", (v2["Size"], v2["SnapshotId"]), (20, snap))

    step("create_tags / delete_tags")
    ec2.create_tags(Resources=[vol, vol2], Tags=[{"Key": "env", "Value": "test"}, {"Key": "owner", "Value": "boto3"}])

    def by_filter(*filters, **kw):
        fs = [{"Name": n, "Values": vals} for n, vals in filters]
        return sorted(v["VolumeId"] for v in ec2.describe_volumes(Filters=fs, **kw)["Volumes"])

    eq("tag:env=test", by_filter(("tag:env", ["test"])), sorted([vol, vol2]))
    ec2.delete_tags(Resources=[vol2], Tags=[{"Key": "env"}])
    eq("tag:env=test after delete_tags", by_filter(("tag:env", ["test"])), [vol])
    eq("tag-key=owner", by_filter(("tag-key", ["owner"])), sorted([vol, vol2]))
    ec2.delete_tags(Resources=[vol2], Tags=[{"Key": "owner", "Value": "someone-else"}])
    eq("delete_tags with a different value keeps the tag", by_filter(("tag:owner", ["boto3"])), sorted([vol, vol2]))

    step("describe_volumes filters")
    eq("status=in-use", by_filter(("status", ["in-use"])), [vol])
    eq("status=available", by_filter(("status", ["available"])), [vol2])
    eq("attachment.instance-id", by_filter(("attachment.instance-id", [inst_a])), [vol])
    eq("attachment.instance-id (other)", by_filter(("attachment.instance-id", [inst_b])), [])
    eq("tag:Name=boto3-* and volume-type=gp3", by_filter(("tag:Name", ["boto3-*"]), ("volume-type", ["gp3"])), [vol])
    eq("size=20", by_filter(("size", ["20"])), sorted([vol, vol2]))

    step("paginator over 12 volumes")
    for i in range(10):
        ec2.create_volume(
            AvailabilityZone=zone_b, Size=1, VolumeType="gp3",
            TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "batch", "Value": "page"}, {"Key": "Name", "Value": f"page-{i}"}]}],
        )
    poll("no volume creating", lambda: by_filter(("status", ["creating"])), lambda ids: ids == [])
    everything = sorted(v["VolumeId"] for v in ec2.describe_volumes()["Volumes"])
    eq("volume count", len(everything), 12)
    pages = list(ec2.get_paginator("describe_volumes").paginate(PaginationConfig={"PageSize": 5}))
    eq("page sizes", [len(p["Volumes"]) for p in pages], [5, 5, 2])
    check(all(p.get("NextToken") for p in pages[:-1]), "a page before the last has no NextToken")
    check(not pages[-1].get("NextToken"), "the last page has a NextToken")
    eq("paginated volumes", sorted(v["VolumeId"] for p in pages for v in p["Volumes"]), everything)
    # MaxItems stops early and hands back a resume token the paginator accepts.
    first = ec2.get_paginator("describe_volumes").paginate(PaginationConfig={"PageSize": 5, "MaxItems": 7}).build_full_result()
    eq("MaxItems 7", len(first["Volumes"]), 7)
    check(first.get("NextToken"), "no resume token after MaxItems")
    rest = ec2.get_paginator("describe_volumes").paginate(PaginationConfig={"PageSize": 5, "StartingToken": first["NextToken"]}).build_full_result()
    eq("resumed volumes", sorted(v["VolumeId"] for v in first["Volumes"] + rest["Volumes"]), everything)
    filtered = [v for p in ec2.get_paginator("describe_volumes").paginate(Filters=[{"Name": "tag:batch", "Values": ["page"]}], PaginationConfig={"PageSize": 5}) for v in p["Volumes"]]
    eq("filtered and paginated", len(filtered), 10)
    expect_error("InvalidParameterValue", ec2.describe_volumes, MaxResults=4)
    expect_error("InvalidParameterCombination", ec2.describe_volumes, VolumeIds=[vol], MaxResults=5)

    step("error paths")
    expect_error("InvalidVolume.ZoneMismatch", ec2.attach_volume, VolumeId=vol2, InstanceId=inst_b, Device="/dev/xvdbb")
    expect_error("VolumeInUse", ec2.delete_volume, VolumeId=vol)
    expect_error("InvalidVolume.NotFound", ec2.describe_volumes, VolumeIds=["vol-0badc0ffee0000000"])
    expect_error("InvalidVolumeID.Malformed", ec2.describe_volumes, VolumeIds=["not-a-volume"])
    expect_error("InvalidInstanceID.NotFound", ec2.attach_volume, VolumeId=vol2, InstanceId="i-0badc0ffee0000000", Device="/dev/xvdbb")
    expect_error("DryRunOperation", ec2.attach_volume, status=412, DryRun=True, VolumeId=vol2, InstanceId=inst_a, Device="/dev/xvdbb")
    expect_error("InvalidSnapshot.NotFound", ec2.create_volume, AvailabilityZone=zone_a, SnapshotId="snap-0badc0ffee0000000")
    expect_error("InvalidPaginationToken", ec2.describe_volumes, MaxResults=5, NextToken="!!not-a-token!!")

    step("detach_volume")
    d = ec2.detach_volume(VolumeId=vol)
    check(d["State"] in ("detaching", "detached"), f"detach state {d['State']}")
    ec2.get_waiter("volume_available").wait(VolumeIds=[vol], WaiterConfig=FAST_WAITER)
    eq("attachments after detach", volume(ec2, vol).get("Attachments"), [])
    if backend == "loop" and attached_dev:
        try:
            with open(f"/sys/block/{os.path.basename(attached_dev)}/loop/backing_file") as f:
                backing = f.read().strip()
        except FileNotFoundError:
            backing = ""
        check(vol not in backing, f"{attached_dev} still backs {vol} after detach: {backing}")
        print(f"[boto3]   {attached_dev} released", flush=True)
    inst = ec2.describe_instances(InstanceIds=[inst_a])["Reservations"][0]["Instances"][0]
    eq("block device mappings after detach", [m for m in inst.get("BlockDeviceMappings", []) if m.get("Ebs")], [])

    step("delete everything (volume_deleted waiter)")
    ids = all_volume_ids(ec2)
    for vid in ids:
        eq(f"delete_volume {vid}", ec2.delete_volume(VolumeId=vid)["ResponseMetadata"]["HTTPStatusCode"], 200)
    eq("delete_snapshot", ec2.delete_snapshot(SnapshotId=snap)["ResponseMetadata"]["HTTPStatusCode"], 200)
    ec2.get_waiter("volume_deleted").wait(VolumeIds=ids, WaiterConfig=FAST_WAITER)
    poll("no volumes left", lambda: all_volume_ids(ec2), lambda x: x == [])
    expect_error("InvalidVolume.NotFound", ec2.describe_volumes, VolumeIds=[vol])
    expect_error("InvalidSnapshot.NotFound", ec2.describe_snapshots, SnapshotIds=[snap])
    eq("snapshots left", ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"], [])
    eq("volumes left", ec2.describe_volumes()["Volumes"], [])

    step(f"stop_instances / start_instances ({inst_b})")

    def change(resp, key):
        c = resp[key][0]
        return (c["InstanceId"], c["PreviousState"]["Name"], c["PreviousState"]["Code"], c["CurrentState"]["Name"], c["CurrentState"]["Code"])

    def instance(iid):
        return ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]

    eq("stop_instances", change(ec2.stop_instances(InstanceIds=[inst_b]), "StoppingInstances"), (inst_b, "running", 16, "stopping", 64))
    ec2.get_waiter("instance_stopped").wait(InstanceIds=[inst_b], WaiterConfig=FAST_WAITER)
    i = instance(inst_b)
    eq("stopped state", (i["State"]["Name"], i["State"]["Code"]), ("stopped", 80))
    eq("stopped state reason", i.get("StateReason", {}).get("Code"), "Client.UserInitiatedShutdown")
    stopped = [x["InstanceId"] for r in ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["stopped"]}])["Reservations"] for x in r["Instances"]]
    eq("instance-state-name=stopped", stopped, [inst_b])
    eq("stop_instances(Force) of a stopped instance", change(ec2.stop_instances(InstanceIds=[inst_b], Force=True), "StoppingInstances"), (inst_b, "stopped", 80, "stopped", 80))
    vol3 = ec2.create_volume(AvailabilityZone=zone_b, Size=1, VolumeType="gp3")["VolumeId"]
    ec2.get_waiter("volume_available").wait(VolumeIds=[vol3], WaiterConfig=FAST_WAITER)
    ec2.attach_volume(VolumeId=vol3, InstanceId=inst_b, Device="/dev/xvdba")
    poll("attached to the stopped instance", lambda: volume(ec2, vol3), lambda v: [x["State"] for x in v["Attachments"]] == ["attached"])
    ec2.modify_instance_attribute(InstanceId=inst_b, BlockDeviceMappings=[{"DeviceName": "/dev/xvdba", "Ebs": {"DeleteOnTermination": True}}])
    eq("DeleteOnTermination", volume(ec2, vol3)["Attachments"][0]["DeleteOnTermination"], True)
    eq("start_instances", change(ec2.start_instances(InstanceIds=[inst_b]), "StartingInstances"), (inst_b, "stopped", 80, "pending", 0))
    ec2.get_waiter("instance_running").wait(InstanceIds=[inst_b], WaiterConfig=FAST_WAITER)
    eq("volume after the start", volume(ec2, vol3)["Attachments"][0]["State"], "attached")

    step(f"terminate_instances ({inst_b})")
    expect_error("InvalidInstanceID.NotFound", ec2.terminate_instances, InstanceIds=["i-0badc0ffee0000000"])
    expect_error("InvalidInstanceID.Malformed", ec2.terminate_instances, InstanceIds=["node-1"])
    eq("terminate_instances", change(ec2.terminate_instances(InstanceIds=[inst_b]), "TerminatingInstances"), (inst_b, "running", 16, "shutting-down", 32))
    ec2.get_waiter("instance_terminated").wait(InstanceIds=[inst_b], WaiterConfig=FAST_WAITER)
    eq("terminated state", instance(inst_b)["State"], {"Name": "terminated", "Code": 48})
    ec2.get_waiter("volume_deleted").wait(VolumeIds=[vol3], WaiterConfig=FAST_WAITER)
    print(f"[boto3]   termination deleted the DeleteOnTermination volume {vol3}", flush=True)
    expect_error("IncorrectInstanceState", ec2.start_instances, InstanceIds=[inst_b])
    eq("volumes left", ec2.describe_volumes()["Volumes"], [])

    print(f"[boto3] all checks passed with boto3 {boto3.__version__}", flush=True)
    return 0


def run(main_fn):
    """Exit with main_fn's status, reporting a failed check or an unexpected EC2 error with the step it ended."""
    try:
        sys.exit(main_fn())
    except CheckFailed as e:
        print(f"[boto3] FAIL ({STEP}): {e}", file=sys.stderr)
        sys.exit(1)
    except ClientError as e:
        print(f"[boto3] FAIL ({STEP}): unexpected {e.response['Error']['Code']}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run(main)
