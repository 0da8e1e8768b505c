package instancetypes

import (
	"strings"
	"testing"
)

// TestVolumeLimit: the documented limits (EC2 User Guide, "Amazon EBS volume limits for Amazon EC2 instances")
// less the root volume, and on shared limits the network interfaces past the primary one.
func TestVolumeLimit(t *testing.T) {
	cases := []struct {
		name       string
		interfaces int
		want       int
	}{
		// Shared Nitro: 27 slots left with the primary interface, less the root volume.
		{"m5.large", 1, 26},
		{"t3.medium", 1, 26},
		{"m5.large", 3, 24},
		{"m5.metal", 1, 30},
		// Shared with NVMe instance store: one slot each.
		{"c5d.large", 1, 25},
		{"i4i.32xlarge", 1, 18},
		{"d3.8xlarge", 1, 2},
		{"d3.8xlarge", 4, 0},
		// Dedicated: interfaces take no slot.
		{"m7i.large", 1, 31},
		{"m7i.large", 8, 31},
		{"c7i.16xlarge", 1, 47},
		{"r7a.48xlarge", 1, 127},
		{"m7i.metal-24xl", 1, 38},
		{"m7i.metal-48xl", 1, 78},
		// Dedicated although EC2 reports the type as shared.
		{"i7ie.metal-24xl", 4, 38},
		// Xen: 40 less the root volume, interfaces take none.
		{"m4.large", 1, 39},
		{"t2.medium", 2, 39},
		// Multi-card and accelerated types.
		{"p5.48xlarge", 32, 63},
		{"p4d.24xlarge", 4, 27},
		{"trn1.32xlarge", 1, 27},
		{"trn2.48xlarge", 1, 63},
		{"g5.48xlarge", 1, 8},
		{"inf1.24xlarge", 1, 10},
		{"mac1.metal", 1, 15},
	}
	for _, tc := range cases {
		info, ok := Lookup(tc.name)
		if !ok {
			t.Errorf("%s unknown", tc.name)
			continue
		}
		if got := info.VolumeLimitWith(tc.interfaces); got != tc.want {
			t.Errorf("%s with %d interfaces: VolumeLimitWith = %d, want %d", tc.name, tc.interfaces, got, tc.want)
		}
	}
}

func TestVolumeLimitDefaultInterfaces(t *testing.T) {
	info, _ := Lookup("m5.large")
	if got, want := info.VolumeLimit(), info.VolumeLimitWith(1); got != want {
		t.Errorf("VolumeLimit = %d, want %d", got, want)
	}
}

// TestTableCovers: every current family the limits page names, and the types the project names, are in the
// table, with the facts the page gives.
func TestTableCovers(t *testing.T) {
	for _, name := range []string{Default, LaunchDefault, "m7i.large", "m7i-flex.large", "c7i-flex.large", "r7iz.large",
		"m8g.large", "c8g.large", "x8g.large", "i7ie.large", "i8g.large", "g6.xlarge", "g6e.xlarge", "gr6.4xlarge",
		"f2.6xlarge", "p5e.48xlarge", "p5en.48xlarge", "trn2.48xlarge", "hpc7a.96xlarge", "u7i-12tb.224xlarge",
		"t4g.medium", "m6g.large", "c6g.large", "t3.medium", "c4.large", "m1.small"} {
		if _, ok := Lookup(name); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if n := len(Names()); n < 1000 {
		t.Errorf("%d types, want the full list (over 1000)", n)
	}
	for _, n := range Names() {
		info, _ := Lookup(n)
		switch {
		case info.Hypervisor == HypervisorXen && (info.MaximumEbsAttachments != 40 || info.NvmeSupport != NvmeUnsupported):
			t.Errorf("%s: Xen with %d attachments, NVMe %s", n, info.MaximumEbsAttachments, info.NvmeSupport)
		// Virtualized shared types have 28 slots; bare metal reports its own count (31) beside its instance store,
		// and EC2 reports 28 on the multi-card accelerated types, whose primary interface takes no EBS slot.
		case info.AttachmentLimitType == LimitShared && !strings.Contains(n, ".metal") && !multiCard[n] &&
			info.MaximumEbsAttachments+info.InstanceStoreVolumes+1 > 28:
			t.Errorf("%s: shared limit of %d plus %d instance store volumes is more than the 28 slots", n,
				info.MaximumEbsAttachments, info.InstanceStoreVolumes)
		case info.Architecture == ArchArm64 && !strings.ContainsAny(strings.SplitN(n, ".", 2)[0], "gam"):
			t.Errorf("%s: arm64 outside Graviton and mac families", n)
		}
	}
}

var multiCard = map[string]bool{"dl1.24xlarge": true, "inf2.24xlarge": true, "inf2.48xlarge": true,
	"trn1.32xlarge": true, "trn1n.32xlarge": true}

func TestResolve(t *testing.T) {
	cases := []struct {
		name      string
		how       string
		wantLimit int
	}{
		{"m7i.large", FromTable, 31},
		// A size newer than the table: the family's lowest limit.
		{"m7i.192xlarge", FromFamily, 31},
		{"c5d.96xlarge", FromFamily, 22},
		// An unknown family and no type at all: the default type's shared limit.
		{"z9.huge", FromDefault, 26},
		{"", FromDefault, 26},
	}
	for _, tc := range cases {
		info, how := Resolve(tc.name)
		if how != tc.how || info.VolumeLimit() != tc.wantLimit || info.Name != tc.name {
			t.Errorf("Resolve(%q) = %s limit %d (%s), want %s limit %d", tc.name, info.Name, info.VolumeLimit(), how, tc.how, tc.wantLimit)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	head := "type\thypervisor\tarch\tvcpus\tmib\tnvme\tlimit\tebs\tstores\n"
	for _, row := range []string{
		"m5.large\tnitro\tx86_64\t2\t8192\trequired\tshared\t27",                                                               // a column short
		"m5.large\tkvm\tx86_64\t2\t8192\trequired\tshared\t27\t0",                                                              // hypervisor
		"m5.large\tnitro\tx86_64\t2\t8192\trequired\tsome\t27\t0",                                                              // limit type
		"m5.large\tnitro\tx86_64\t2\t8192\trequired\t-\t27\t0",                                                                 // Nitro without a limit type
		"m4.large\txen\tx86_64\t2\t8192\tunsupported\tshared\t40\t0",                                                           // Xen with one
		"m5.large\tnitro\tx86_64\ttwo\t8192\trequired\tshared\t27\t0",                                                          // a count
		"m5.large\tnitro\tx86_64\t2\t8192\trequired\tshared\t1\t0",                                                             // no room for a data volume
		"m5.large\tnitro\tx86_64\t2\t8192\trequired\tshared\t27\t0\nm5.large\tnitro\tx86_64\t2\t8192\trequired\tshared\t27\t0", // twice
	} {
		if _, err := parse(head + row + "\n"); err == nil {
			t.Errorf("parse accepted %q", row)
		}
	}
	r, err := parse("# comment\n" + head + "m5.large\tnitro\tx86_64\t2\t8192\trequired\tshared\t27\t0\n")
	if err != nil || len(r.names) != 1 || r.byName["m5.large"].MaximumEbsAttachments != 27 {
		t.Errorf("parse = %+v, %v", r, err)
	}
}

func TestNamesSorted(t *testing.T) {
	names := Names()
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("Names not sorted at %s, %s", names[i-1], names[i])
		}
	}
}
