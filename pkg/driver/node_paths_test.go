package driver

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckVolumeID(t *testing.T) {
	for id, want := range map[string]codes.Code{
		"vol-0123456789abcdef0":                  codes.OK,
		"vol-01234567":                           codes.OK,
		"":                                       codes.InvalidArgument,
		"garbage":                                codes.NotFound,
		"vol-":                                   codes.NotFound,
		"vol-0123456789abcdef":                   codes.NotFound, // 16 digits: neither EC2 length
		"vol-0123456789ABCDEF0":                  codes.NotFound,
		"vol-0123456789abcdef0/..":               codes.NotFound,
		"vol-0123456789abcdef0\x00":              codes.NotFound,
		"vol-" + strings.Repeat("a", 10000):      codes.NotFound,
		"snap-0123456789abcdef0":                 codes.NotFound,
		" vol-0123456789abcdef0":                 codes.NotFound,
		"vol-0123456789abcdef0.img":              codes.NotFound,
		"vol-0123456789abcdef0\nvol-0123456789a": codes.NotFound,
	} {
		if got := status.Code(checkVolumeID(id)); got != want {
			t.Errorf("checkVolumeID(%.40q) = %s, want %s", id, got, want)
		}
	}
}

func TestPathShape(t *testing.T) {
	for p, ok := range map[string]bool{
		"/var/lib/kubelet/pods/x/volumes/y/mount": true,
		"/":                                   true,
		"":                                    false,
		"relative/path":                       false,
		"./x":                                 false,
		"/a/../b":                             false,
		"/a/./b":                              false,
		"/a//b":                               false,
		"/a/b/":                               false,
		"/a/b/..":                             false,
		"/a\x00b":                             false,
		"/" + strings.Repeat("a", maxPathLen): false,
	} {
		if got := pathShapeError("path", p) == nil; got != ok {
			t.Errorf("pathShapeError(%.40q) ok = %v, want %v", p, got, ok)
		}
	}
}

func TestCheckMountFlags(t *testing.T) {
	tests := []struct {
		flags    []string
		readOnly bool
		ok       bool
	}{
		{nil, false, true},
		{[]string{"noatime", "nodiratime"}, false, true},
		{[]string{"noexec,nosuid,nodev"}, false, true},
		{[]string{"data=ordered", "commit=30", "errors=remount-ro"}, false, true},
		{[]string{"context=system_u:object_r:container_file_t:s0"}, false, true},
		{[]string{"rw"}, false, true},
		{[]string{"ro"}, true, true},
		{[]string{"rw"}, true, false},
		{[]string{"noatime,RW"}, true, false},
		{[]string{"rw,exec; x"}, false, false},
		{[]string{""}, false, false},
		{[]string{"noexec,"}, false, false},
		{[]string{",noexec"}, false, false},
		{[]string{"no exec"}, false, false},
		{[]string{`data="journal"`}, false, false},
		{[]string{"bind"}, false, false},
		{[]string{"rbind"}, false, false},
		{[]string{"remount"}, false, false},
		{[]string{"loop=/dev/loop0"}, false, false},
		{[]string{"offset=4096"}, false, false},
		{[]string{"x-mount.mkdir"}, false, false},
		{[]string{"X-mount.subdir=etc"}, false, false},
		{[]string{"-o", "rw"}, false, false},
		{[]string{"a=b=c"}, false, false},
		{[]string{"nosuid\n"}, false, false},
	}
	for _, tc := range tests {
		err := checkMountFlags(tc.flags, tc.readOnly)
		if (err == nil) != tc.ok {
			t.Errorf("checkMountFlags(%q, read-only %v) = %v, want ok %v", tc.flags, tc.readOnly, err, tc.ok)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Errorf("checkMountFlags(%q) code %s, want InvalidArgument", tc.flags, status.Code(err))
		}
	}
}
