package loopdev

import "testing"

func TestDevNumbers(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop0": {dev: "7:0"},
		"loop3": {dev: "7:48"}, // max_part=15: minors step by 16
		"loop4": {dev: "259:12"},
		"loop5": {dev: "7"},
		"loop6": {dev: "7:x"},
		"loop7": {},
	})
	tests := []struct {
		name         string
		major, minor uint32
		wantErr      bool
	}{
		{"loop0", 7, 0, false},
		{"loop3", 7, 48, false},
		{"loop4", 259, 12, false},
		{"loop5", 0, 0, true},
		{"loop6", 0, 0, true},
		{"loop7", 0, 0, true},
		{"loop9", 0, 0, true},
		{"../loop0", 0, 0, true},
	}
	for _, tc := range tests {
		ma, mi, err := sys.DevNumbers(Device{Name: tc.name})
		if (err != nil) != tc.wantErr || ma != tc.major || mi != tc.minor {
			t.Errorf("DevNumbers(%s) = %d:%d, %v; want %d:%d, error %v", tc.name, ma, mi, err, tc.major, tc.minor,
				tc.wantErr)
		}
	}
}
