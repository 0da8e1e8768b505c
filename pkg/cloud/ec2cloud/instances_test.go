package ec2cloud

import (
	"fmt"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

func TestGetInstance(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-inst", cloud.DiskOptions{Zone: zoneB})
	a, err := e.AttachDisk(testCtx(t), d.ID, fakecloudtest.InstanceB)
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.GetInstance(testCtx(t), fakecloudtest.InstanceB)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != fakecloudtest.InstanceB || in.Zone != zoneB || in.InstanceType == "" || in.State == "" {
		t.Errorf("instance = %+v", in)
	}
	if _, ok := in.Devices["/dev/xvda"]; !ok || in.Devices[a.Device] != d.ID {
		t.Errorf("devices = %v; want the root device and %s → %s", in.Devices, a.Device, d.ID)
	}
	_, err = e.GetInstance(testCtx(t), "i-0123456789abcdef0")
	wantKinds(t, err, cloud.ErrNotFound)
	// A malformed ID names no instance either (the batched DescribeInstances filters by ID).
	_, err = e.GetInstance(testCtx(t), "bogus")
	wantKinds(t, err, cloud.ErrNotFound)
}

func TestListZones(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	zones, err := e.ListZones(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "[{us-east-1a use1-az1 available} {us-east-1b use1-az2 available} {us-east-1c use1-az4 available}]"
	if got := fmt.Sprint(zones); got != want {
		t.Errorf("zones = %s, want %s", got, want)
	}
}
