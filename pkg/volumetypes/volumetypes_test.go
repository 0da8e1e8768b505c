package volumetypes

import (
	"errors"
	"testing"
)

func TestCheckSize(t *testing.T) {
	cases := []struct {
		volumeType string
		size       int32
		ok         bool
	}{
		{"gp3", 1, true},
		{"gp3", 65536, true},
		{"gp3", 65537, false},
		{"", 16384, true}, // EC2's default, gp2
		{"", 16385, false},
		{"standard", 1025, false},
		{"io1", 3, false},
		{"st1", 124, false},
		{"st1", 125, true},
		{"gp9", 1 << 30, true}, // unknown: the cloud says why
	}
	for _, tc := range cases {
		err := CheckSize(tc.volumeType, tc.size)
		var se *SizeError
		if (err == nil) != tc.ok || (err != nil && !errors.As(err, &se)) {
			t.Errorf("CheckSize(%q, %d) = %v, want ok=%v", tc.volumeType, tc.size, err, tc.ok)
		}
	}
}
