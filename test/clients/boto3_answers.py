#!/usr/bin/env python3
"""Check through boto3 that fakecloud answers as EC2 does: tag limits, missing-parameter names, time filters,
an empty tag specification, ModifyVolume's default IOPS.

Usage: python3 test/clients/boto3_answers.py [ENDPOINT]

Environment: FAKECLOUD_ENDPOINT (when no argument), FAKECLOUD_INSTANCE_A (an instance in us-east-1a),
POLL_TIMEOUT (seconds per wait, default 30). It leaves the volume it made detached and deleted.
"""

import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

POLL_TIMEOUT = float(os.environ.get("POLL_TIMEOUT", "30"))
MS = "%Y-%m-%dT%H:%M:%S.{ms:03d}Z"


def fail(msg):
    print(f"[boto3-answers] FAIL: {msg}", flush=True)
    sys.exit(1)


def error_of(fn, **kw):
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["Error"]["Message"]
    return None, None


def wait(what, fn, done):
    deadline = time.monotonic() + POLL_TIMEOUT
    while not done(fn()):
        if time.monotonic() > deadline:
            fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def displayed(t):
    """The time as fakecloud displayed it, with milliseconds."""
    return t.strftime(MS.format(ms=t.microsecond // 1000))


def main():
    endpoint = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FAKECLOUD_ENDPOINT", "")
    if not endpoint:
        print("usage: boto3_answers.py ENDPOINT (or set FAKECLOUD_ENDPOINT)", file=sys.stderr)
        return 2
    inst = os.environ.get("FAKECLOUD_INSTANCE_A", "i-0123456789abcdef0")
    ec2 = boto3.session.Session(
        aws_access_key_id="AKIAFAKECLOUDTEST000", aws_secret_access_key="fakecloud-secret-key", region_name="us-east-1"
    ).client("ec2", endpoint_url=endpoint, config=Config(retries={"mode": "standard", "max_attempts": 3}))

    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1)["VolumeId"]
    get = lambda: ec2.describe_volumes(VolumeIds=[vol])["Volumes"][0]
    wait("available", get, lambda v: v["State"] == "available")

    ec2.create_tags(Resources=[vol], Tags=[{"Key": f"k{i}", "Value": "v"} for i in range(50)])
    described = [t for page in ec2.get_paginator("describe_tags").paginate(
        Filters=[{"Name": "resource-id", "Values": [vol]}], PaginationConfig={"PageSize": 7}) for t in page["Tags"]]
    if sorted(t["Key"] for t in described) != sorted(f"k{i}" for i in range(50)) or any(
            t["ResourceType"] != "volume" or t["Value"] != "v" for t in described):
        fail(f"describe_tags of {vol} in pages of 7 listed {len(described)} tags, want its 50")
    got = ec2.describe_tags(Filters=[{"Name": "key", "Values": ["k4?"]}, {"Name": "resource-type", "Values": ["volume"]}])["Tags"]
    if sorted(t["Key"] for t in got) != [f"k4{i}" for i in range(10)]:
        fail(f"describe_tags key=k4? listed {[t['Key'] for t in got]}")
    auto = lambda: ec2.describe_volume_attribute(VolumeId=vol, Attribute="autoEnableIO")["AutoEnableIO"]["Value"]
    if auto():
        fail(f"a new volume {vol} has autoEnableIO on")
    ec2.modify_volume_attribute(VolumeId=vol, AutoEnableIO={"Value": True})
    if not auto():
        fail(f"modify_volume_attribute left autoEnableIO of {vol} off")
    if ec2.describe_volume_attribute(VolumeId=vol, Attribute="productCodes").get("ProductCodes", []) != []:
        fail("a volume has product codes")
    code, _ = error_of(ec2.modify_volume_attribute, VolumeId=vol)
    if code != "MissingParameter":
        fail(f"modify_volume_attribute with no attribute answered {code}, want MissingParameter")
    code, _ = error_of(ec2.create_tags, Resources=[vol], Tags=[{"Key": "k50", "Value": "v"}])
    if code != "TagLimitExceeded":
        fail(f"51st tag answered {code}, want TagLimitExceeded")
    for name, fn, kw in [
        ("create_tags", ec2.create_tags, {"Resources": [], "Tags": [{"Key": "a", "Value": "b"}]}),
        ("delete_tags", ec2.delete_tags, {"Resources": []}),
    ]:
        code, msg = error_of(fn, **kw)
        if code != "MissingParameter" or "resourceIdSet" not in msg:
            fail(f"{name} without resources answered {code} {msg!r}, want MissingParameter naming resourceIdSet")

    ec2.attach_volume(VolumeId=vol, InstanceId=inst, Device="/dev/xvdba")
    wait("attached", get, lambda v: v["Attachments"] and v["Attachments"][0]["State"] == "attached")
    v = get()
    for name, value in [("create-time", displayed(v["CreateTime"])), ("attachment.attach-time", displayed(v["Attachments"][0]["AttachTime"]))]:
        got = ec2.describe_volumes(Filters=[{"Name": name, "Values": [value]}])["Volumes"]
        if [x["VolumeId"] for x in got] != [vol]:
            fail(f"filter {name}={value} found {[x['VolumeId'] for x in got]}, want [{vol}]")

    ec2.detach_volume(VolumeId=vol)
    wait("detached", get, lambda v: v["State"] == "available")
    ec2.delete_volume(VolumeId=vol)

    for kw, want in [
        ({}, ("MissingParameter", "The request must contain the parameter size/snapshot")),
        ({"Size": 10, "VolumeType": "io1"}, ("InvalidParameterCombination", "The parameter iops must be specified for io1 volumes.")),
    ]:
        got = error_of(ec2.create_volume, AvailabilityZone="us-east-1a", **kw)
        if got != want:
            fail(f"create_volume {kw} answered {got}, want EC2's {want}")
    code, msg = error_of(ec2.create_volume, AvailabilityZone="us-east-1a", Size=1,
                         TagSpecifications=[{"ResourceType": "volume", "Tags": []}])
    if code != "InvalidTagKey.Malformed":
        fail(f"a tag specification with no tags answered {code} {msg!r}, want InvalidTagKey.Malformed")
    big = ec2.create_volume(AvailabilityZone="us-east-1a", Size=100, VolumeType="gp2")["VolumeId"]
    wait("available", lambda: ec2.describe_volumes(VolumeIds=[big])["Volumes"][0], lambda v: v["State"] == "available")
    mod = ec2.modify_volume(VolumeId=big, VolumeType="io2")["VolumeModification"]
    if mod.get("TargetIops") != 3000:
        fail(f"ModifyVolume to io2 without Iops targets {mod.get('TargetIops')} IOPS, want EC2's default 3000")
    wait("modified", lambda: ec2.describe_volumes_modifications(VolumeIds=[big])["VolumesModifications"][0],
         lambda m: m["ModificationState"] in ("optimizing", "completed"))
    # Filters EC2 documents beyond the common ones: each selects the volume, its modification or its zone.
    zone_id = ec2.describe_availability_zones(ZoneNames=["us-east-1a"])["AvailabilityZones"][0]["ZoneId"]
    for what, list_ids, name, value, want in [
        ("volumes", lambda f: [x["VolumeId"] for x in ec2.describe_volumes(Filters=f)["Volumes"]], "availability-zone-id", zone_id, big),
        ("volumes", lambda f: [x["VolumeId"] for x in ec2.describe_volumes(Filters=f)["Volumes"]], "operator.managed", "false", big),
        ("modifications", lambda f: [x["VolumeId"] for x in ec2.describe_volumes_modifications(Filters=f)["VolumesModifications"]],
         "targetMultiAttachEnabled", "false", big),
        ("zones", lambda f: [x["ZoneName"] for x in ec2.describe_availability_zones(Filters=f)["AvailabilityZones"]],
         "opt-in-status", "opt-in-not-required", "us-east-1a"),
    ]:
        if want not in list_ids([{"Name": name, "Values": [value]}]):
            fail(f"{what} filter {name}={value} did not find {want}")
    ec2.delete_volume(VolumeId=big)
    print("[boto3-answers] PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
