package instancetypes

import "testing"

func TestVolumeLimit(t *testing.T) {
	cases := []struct {
		name string
		want int
	}{
		// 28 shared slots less the root volume and the primary network interface.
		{"m5.large", 26},
		{"t3.medium", 26},
		// Xen: 40 less the root volume.
		{"m4.large", 39},
		{"t2.medium", 39},
	}
	for _, tc := range cases {
		info, ok := Lookup(tc.name)
		if !ok {
			t.Fatalf("%s unknown", tc.name)
		}
		if got := info.VolumeLimit(); got != tc.want {
			t.Errorf("%s: VolumeLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
	if _, ok := Lookup(Default); !ok {
		t.Errorf("default type %s is not in the table", Default)
	}
	if _, ok := Lookup("x9.huge"); ok {
		t.Errorf("unknown type found")
	}
	dedicated := Info{AttachmentLimitType: LimitDedicated, MaximumEbsAttachments: 32, NetworkInterfaces: 1}
	if got := dedicated.VolumeLimit(); got != 31 {
		t.Errorf("dedicated 32: VolumeLimit = %d, want 31", got)
	}
}

func TestNamesSorted(t *testing.T) {
	names := Names()
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("Names not sorted: %v", names)
		}
	}
}
