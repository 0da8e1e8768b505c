#!/usr/bin/env python3
"""Launch instances from fakecloud's built-in images through boto3: DescribeImages, RunInstances with a root and a
data volume, the ClientToken retry, the launch errors, and TerminateInstances deleting DeleteOnTermination volumes.

Usage: python3 test/clients/boto3_instances.py [ENDPOINT]

Environment: FAKECLOUD_ENDPOINT (when no argument), POLL_TIMEOUT (seconds per wait, default 30). It expects a
fresh fakecloud. Exits non-zero on the first failed check.
"""

import os
import sys

import boto3

import boto3_lifecycle as lc
from boto3_lifecycle import FAST_WAITER, check, eq, expect_error, step


def attached_volumes(ec2, iid):
    vols = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [iid]}])["Volumes"]
    return {v["Attachments"][0]["Device"]: v for v in vols}


def main():
    endpoint = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FAKECLOUD_ENDPOINT", "")
    if not endpoint:
        print("usage: boto3_instances.py ENDPOINT (or set FAKECLOUD_ENDPOINT)", file=sys.stderr)
        return 2
    ec2 = lc.client(endpoint)

    step("DescribeImages")
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    eq("architectures", sorted(i["Architecture"] for i in images), ["arm64", "x86_64"])
    x86 = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"]
    eq("x86_64 images", len(x86), 1)
    ami = x86[0]["ImageId"]
    eq("root device", (x86[0]["RootDeviceName"], x86[0]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]), ("/dev/xvda", 8))
    expect_error("InvalidAMIID.NotFound", ec2.describe_images, ImageIds=["ami-0123456789abcdef0"])

    step("RunInstances")
    launch = dict(ImageId=ami, InstanceType="t3.medium", MinCount=1, MaxCount=1,
                  Placement={"AvailabilityZone": "us-east-1b"}, ClientToken="boto3-launch",
                  BlockDeviceMappings=[
                      {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 16}},
                      {"DeviceName": "/dev/sdf", "Ebs": {"VolumeSize": 2, "VolumeType": "gp3", "DeleteOnTermination": False}},
                  ],
                  TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "boto3"}]}])
    expect_error("DryRunOperation", ec2.run_instances, status=412, DryRun=True, **launch)
    res = ec2.run_instances(**launch)
    inst = res["Instances"][0]
    iid = inst["InstanceId"]
    eq("state at launch", inst["State"]["Name"], "pending")
    eq("image and zone", (inst["ImageId"], inst["Placement"]["AvailabilityZone"]), (ami, "us-east-1b"))
    again = ec2.run_instances(**launch)
    eq("retried reservation", (again["ReservationId"], again["Instances"][0]["InstanceId"]), (res["ReservationId"], iid))
    expect_error("IdempotentParameterMismatch", ec2.run_instances, **dict(launch, InstanceType="t3.large"))
    ec2.get_waiter("instance_running").wait(InstanceIds=[iid], WaiterConfig=FAST_WAITER)
    vols = lc.poll("volumes attached", lambda: attached_volumes(ec2, iid),
                   lambda v: len(v) == 2 and all(x["Attachments"][0]["State"] == "attached" for x in v.values()))
    eq("root volume", (vols["/dev/xvda"]["Size"], vols["/dev/xvda"]["Attachments"][0]["DeleteOnTermination"]), (16, True))
    eq("data volume", (vols["/dev/sdf"]["Size"], vols["/dev/sdf"]["Attachments"][0]["DeleteOnTermination"]), (2, False))
    desc = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    eq("DescribeInstances' devices", sorted(m["DeviceName"] for m in desc["BlockDeviceMappings"]), ["/dev/sdf", "/dev/xvda"])

    step("launch errors")
    base = dict(ImageId=ami, InstanceType="t3.medium", MinCount=1, MaxCount=1)
    expect_error("InvalidAMIID.NotFound", ec2.run_instances, **dict(base, ImageId="ami-0123456789abcdef0"))
    expect_error("InvalidAMIID.Malformed", ec2.run_instances, **dict(base, ImageId="image-1"))
    expect_error("InvalidParameterValue", ec2.run_instances, **dict(base, InstanceType="t3.huge"))
    expect_error("InvalidZone.NotFound", ec2.run_instances, **dict(base, Placement={"AvailabilityZone": "us-east-1z"}))
    expect_error("VcpuLimitExceeded", ec2.run_instances, **dict(base, MinCount=1000, MaxCount=1000))

    step("TerminateInstances")
    ec2.terminate_instances(InstanceIds=[iid])
    ec2.get_waiter("instance_terminated").wait(InstanceIds=[iid], WaiterConfig=FAST_WAITER)
    ec2.get_waiter("volume_deleted").wait(VolumeIds=[vols["/dev/xvda"]["VolumeId"]], WaiterConfig=FAST_WAITER)
    ec2.get_waiter("volume_available").wait(VolumeIds=[vols["/dev/sdf"]["VolumeId"]], WaiterConfig=FAST_WAITER)
    ec2.delete_volume(VolumeId=vols["/dev/sdf"]["VolumeId"])

    print(f"[boto3] all instance launch checks passed with boto3 {boto3.__version__}", flush=True)
    return 0


if __name__ == "__main__":
    lc.run(main)
