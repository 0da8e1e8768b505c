package driver

import (
	"errors"
	"testing"
)

func TestIOPSPerGB(t *testing.T) {
	for _, tc := range []struct {
		name          string
		volumeType    string
		sizeGiB       int32
		perGB         int32
		allowIncrease bool
		want          int32
		invalid       bool
	}{
		{name: "within the range", volumeType: "io1", sizeGiB: 100, perGB: 10, want: 1000},
		{name: "capped at the type's maximum", volumeType: "io2", sizeGiB: 65536, perGB: 500, want: 256000},
		{name: "capped at the type's ratio", volumeType: "io1", sizeGiB: 100, perGB: 80, want: 5000},
		{name: "no 32-bit overflow", volumeType: "gp3", sizeGiB: 65536, perGB: 1 << 30, want: 80000},
		{name: "below the minimum is refused", volumeType: "gp3", sizeGiB: 100, perGB: 10, invalid: true},
		{name: "below the minimum, raised", volumeType: "gp3", sizeGiB: 100, perGB: 10, allowIncrease: true, want: 3000},
		{name: "io1 raised to 100", volumeType: "io1", sizeGiB: 4, perGB: 1, allowIncrease: true, want: 100},
		{name: "gp2 has no provisioned IOPS", volumeType: "gp2", sizeGiB: 100, perGB: 3, invalid: true},
		{name: "an unknown type is the cloud's to refuse", volumeType: "gp9", sizeGiB: 10, perGB: 3, want: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := iopsPerGB(tc.volumeType, tc.sizeGiB, tc.perGB, tc.allowIncrease)
			if tc.invalid {
				if !errors.Is(err, errInvalidParameter) {
					t.Fatalf("got %d, %v; want an invalid parameter", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
