package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
)

func TestParseVolumeParams(t *testing.T) {
	cases := []struct {
		name    string
		params  map[string]string
		mutable map[string]string
		check   func(t *testing.T, p volumeParams)
		errKey  string
	}{
		{name: "empty: gp3, the node's default filesystem", check: func(t *testing.T, p volumeParams) {
			if p.disk.VolumeType != DefaultVolumeType || p.fsType != "" || len(p.format) != 0 {
				t.Errorf("params = %+v", p)
			}
		}},
		{name: "everything", params: map[string]string{
			"type": "io2", "IOPS": "4000", "encrypted": "true", "kmsKeyId": "arn:k",
			"tagSpecification_1": "team=storage", "tagSpecification_2": "env = prod ",
			"csi.storage.k8s.io/fstype": "XFS", "blockSize": "4096", "inodeSize": "512",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db", "csi.storage.k8s.io/pv/name": "pvc-1",
		}, check: func(t *testing.T, p volumeParams) {
			d := p.disk
			if d.VolumeType != "io2" || d.IOPS != 4000 || !d.Encrypted || d.KMSKeyID != "arn:k" || d.PVCName != "data" ||
				d.PVCNamespace != "db" || d.PVName != "pvc-1" || d.Tags["team"] != "storage" || d.Tags["env"] != "prod" {
				t.Errorf("disk options = %+v", d)
			}
			if p.fsType != "xfs" || p.format[ContextBlockSize] != "4096" || p.format[ContextInodeSize] != "512" {
				t.Errorf("fs = %q, format = %v", p.fsType, p.format)
			}
		}},
		{name: "iopsPerGB", params: map[string]string{"type": "io1", "iopsPerGB": "50", "allowAutoIOPSPerGBIncrease": "true"}, check: func(t *testing.T, p volumeParams) {
			if p.iopsPerGB != 50 || !p.allowIOPSIncrease {
				t.Errorf("iopsPerGB = %d, increase allowed %v", p.iopsPerGB, p.allowIOPSIncrease)
			}
		}},
		{name: "bad allowAutoIOPSPerGBIncrease", params: map[string]string{"allowAutoIOPSPerGBIncrease": "sometimes"}, errKey: "allowAutoIOPSPerGBIncrease"},
		{name: "mutable overrides class", params: map[string]string{"type": "gp2"}, mutable: map[string]string{"type": "gp3", "iops": "5000", "throughput": "300"},
			check: func(t *testing.T, p volumeParams) {
				if p.disk.VolumeType != "gp3" || p.disk.IOPS != 5000 || p.disk.Throughput != 300 {
					t.Errorf("disk = %+v", p.disk)
				}
			}},
		{name: "templated tags, then the attributes class's", params: map[string]string{
			"tagSpecification_1": "owner={{ .PVCNamespace }}/{{ .PVCName }}", "tagSpecification_2": "tier=bronze", "tagSpecification_3": "drop=me",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db", "csi.storage.k8s.io/pv/name": "pvc-1",
		}, mutable: map[string]string{"tagSpecification_1": "tier=gold", "tagSpecification_2": "pv={{ .PVName }}", "tagDeletion_1": "drop"},
			check: func(t *testing.T, p volumeParams) {
				want := map[string]string{"owner": "db/data", "tier": "gold", "pv": "pvc-1"}
				if len(p.disk.Tags) != len(want) {
					t.Errorf("tags = %v, want %v", p.disk.Tags, want)
				}
				for k, v := range want {
					if p.disk.Tags[k] != v {
						t.Errorf("tag %q = %q, want %q (all: %v)", k, p.disk.Tags[k], v, p.disk.Tags)
					}
				}
			}},
		{name: "the driver's own tag", params: map[string]string{"tagSpecification_1": "CSIVolumeName=x"}, errKey: "CSIVolumeName"},
		{name: "bad template", params: map[string]string{"tagSpecification_1": "a={{ .Nope }}"}, errKey: "Nope"},
		{name: "deleting the driver's own tag", mutable: map[string]string{"tagDeletion_1": "CSIVolumeName"}, errKey: "tagDeletion_1"},
		{name: "deleting an empty key", mutable: map[string]string{"tagDeletion_1": " "}, errKey: "tagDeletion_1"},
		{name: "unknown key", params: map[string]string{"tpye": "gp3"}, errKey: "tpye"},
		{name: "bad iops", params: map[string]string{"iops": "-1"}, errKey: "iops"},
		{name: "iops and iopsPerGB", params: map[string]string{"iops": "100", "iopsPerGB": "10"}, errKey: "iopspergb"},
		{name: "bad bool", params: map[string]string{"encrypted": "yes please"}, errKey: "encrypted"},
		{name: "kms without encryption", params: map[string]string{"kmsKeyId": "k"}, errKey: "kmskeyid"},
		{name: "unsupported fs", params: map[string]string{"csi.storage.k8s.io/fstype": "btrfs"}, errKey: "btrfs"},
		{name: "block size not a power of two", params: map[string]string{"blockSize": "3000"}, errKey: "blockSize"},
		{name: "ext4-only option on xfs", params: map[string]string{"csi.storage.k8s.io/fstype": "xfs", "numberOfInodes": "100"}, errKey: "numberOfInodes"},
		{name: "bigalloc and cluster size, keys in any case", params: map[string]string{"EXT4BIGALLOC": "true", "ext4clustersize": "16384"},
			check: func(t *testing.T, p volumeParams) {
				if len(p.format) != 2 || p.format[ContextExt4BigAlloc] != "true" || p.format[ContextExt4ClusterSize] != "16384" {
					t.Errorf("format = %v", p.format)
				}
			}},
		{name: "bigalloc on ext4", params: map[string]string{"csi.storage.k8s.io/fstype": "ext4", "ext4BigAlloc": "TRUE"},
			check: func(t *testing.T, p volumeParams) {
				if len(p.format) != 1 || p.format[ContextExt4BigAlloc] != "true" {
					t.Errorf("format = %v", p.format)
				}
			}},
		{name: "bigalloc false passes nothing", params: map[string]string{"ext4BigAlloc": "false", "csi.storage.k8s.io/fstype": "xfs"},
			check: func(t *testing.T, p volumeParams) {
				if len(p.format) != 0 {
					t.Errorf("format = %v", p.format)
				}
			}},
		{name: "ext3", params: map[string]string{"csi.storage.k8s.io/fstype": "ext3", "blockSize": "1024", "bytesPerInode": "4096"},
			check: func(t *testing.T, p volumeParams) {
				if p.fsType != FSExt3 || p.format[ContextBlockSize] != "1024" || p.format[ContextBytesPerInode] != "4096" {
					t.Errorf("fs = %q, format = %v", p.fsType, p.format)
				}
			}},
		{name: "cluster size without bigalloc", params: map[string]string{"ext4ClusterSize": "16384"}, errKey: "ext4ClusterSize"},
		{name: "cluster size with bigalloc false", params: map[string]string{"ext4BigAlloc": "false", "ext4ClusterSize": "16384"},
			errKey: "ext4ClusterSize"},
		{name: "bigalloc not a bool", params: map[string]string{"ext4BigAlloc": "on"}, errKey: "ext4BigAlloc"},
		{name: "cluster size not a power of two", params: map[string]string{"ext4BigAlloc": "true", "ext4ClusterSize": "12000"},
			errKey: "ext4ClusterSize"},
		{name: "cluster size not a number", params: map[string]string{"ext4BigAlloc": "true", "ext4ClusterSize": "16k"},
			errKey: "ext4ClusterSize"},
		{name: "bigalloc on xfs", params: map[string]string{"csi.storage.k8s.io/fstype": "xfs", "ext4BigAlloc": "true"}, errKey: "ext4BigAlloc"},
		{name: "bigalloc on ext3", params: map[string]string{"csi.storage.k8s.io/fstype": "ext3", "ext4BigAlloc": "true"}, errKey: "ext4BigAlloc"},
		{name: "cluster size on xfs", params: map[string]string{"csi.storage.k8s.io/fstype": "xfs", "ext4BigAlloc": "true", "ext4ClusterSize": "16384"},
			errKey: "ext4"},
		{name: "ext2", params: map[string]string{"csi.storage.k8s.io/fstype": "ext2"}, errKey: "ext2"},
		{name: "bad tag", params: map[string]string{"tagSpecification_1": "novalue"}, errKey: "tagSpecification_1"},
		{name: "unknown mutable key", mutable: map[string]string{"size": "10"}, errKey: "size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseVolumeParams(tc.params, tc.mutable)
			if tc.errKey != "" {
				if !errors.Is(err, errInvalidParameter) || !strings.Contains(err.Error(), tc.errKey) {
					t.Fatalf("err = %v, want an invalid parameter naming %q", err, tc.errKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestParseSnapshotParams(t *testing.T) {
	o, err := parseSnapshotParams(map[string]string{"tagSpecification_1": "a=b", ParamSnapshotName: "snap", ParamSnapshotNamespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "b", "kubernetes.io/created-for/volumesnapshot/name": "snap", "kubernetes.io/created-for/volumesnapshot/namespace": "ns"}
	for k, v := range want {
		if o.opts.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q (all: %v)", k, o.opts.Tags[k], v, o.opts.Tags)
		}
	}
	o, err = parseSnapshotParams(map[string]string{"tagSpecification_1": "for={{ .VolumeSnapshotNamespace }}/{{ .VolumeSnapshotName }}",
		ParamSnapshotName: "snap", ParamSnapshotNamespace: "ns", ParamSnapshotContentName: "content-1"})
	if err != nil || o.opts.Tags["for"] != "ns/snap" || o.opts.Tags["kubernetes.io/created-for/volumesnapshotcontent/name"] != "content-1" {
		t.Errorf("templated snapshot tags = %v, %v", o.opts.Tags, err)
	}
	if _, err := parseSnapshotParams(map[string]string{"tagSpecification_1": "x={{ printf \"%9999d\" 1 }}"}); !errors.Is(err, errInvalidParameter) {
		t.Errorf("refused template function: %v", err)
	}
	if _, err := parseSnapshotParams(map[string]string{"type": "x"}); !errors.Is(err, errInvalidParameter) {
		t.Errorf("unknown snapshot parameter: %v", err)
	}
	var _ cloud.SnapshotOptions = o.opts
}

func TestParseSnapshotFastRestoreZones(t *testing.T) {
	cases := []struct {
		value string
		want  []string
	}{
		{"us-east-1a", []string{"us-east-1a"}},
		{" us-east-1a , us-east-1b,us-east-1a", []string{"us-east-1a", "us-east-1b"}},
		{"", nil},
		{"us-east-1a,,us-east-1b", nil},
		{" , ", nil},
	}
	for _, tc := range cases {
		for _, key := range []string{"fastSnapshotRestoreAvailabilityZones", ParamFastSnapshotRestoreZones} {
			p, err := parseSnapshotParams(map[string]string{key: tc.value})
			switch {
			case tc.want == nil && !errors.Is(err, errInvalidParameter):
				t.Errorf("%s=%q: %v, %v; want refused", key, tc.value, p.fastRestoreZones, err)
			case tc.want != nil && (err != nil || strings.Join(p.fastRestoreZones, ",") != strings.Join(tc.want, ",")):
				t.Errorf("%s=%q: %v, %v; want %v", key, tc.value, p.fastRestoreZones, err, tc.want)
			}
		}
	}
}

func TestParseVolumeInitializationRate(t *testing.T) {
	cases := []struct {
		value string
		want  int32
	}{
		{"100", 100}, {"300", 300}, {"250", 250},
		{"99", 0}, {"301", 0}, {"0", 0}, {"-5", 0}, {"fast", 0},
	}
	for _, tc := range cases {
		p, err := parseVolumeParams(map[string]string{"volumeInitializationRate": tc.value}, nil)
		switch {
		case tc.want == 0 && !errors.Is(err, errInvalidParameter):
			t.Errorf("%q: %d, %v; want refused", tc.value, p.disk.InitializationRate, err)
		case tc.want != 0 && (err != nil || p.disk.InitializationRate != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.value, p.disk.InitializationRate, err, tc.want)
		}
	}
}
