package driver

import (
	"slices"
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
		// SELinux contexts as kubelet passes them (seLinuxMount): quoted, commas inside the quotes
		{[]string{`context="system_u:object_r:container_file_t:s0:c0,c1"`}, true, true},
		{[]string{`noatime,context="system_u:object_r:container_file_t:s0:c0,c1",nodev`}, false, true},
		{[]string{`defcontext="system_u:object_r:container_file_t:s0:c0,c1"`, "fscontext=system_u:object_r:container_file_t:s0"}, false, true},
		{[]string{"context=system_u:object_r:container_file_t:s0", "context=system_u:object_r:container_file_t:s0"}, false, true},
		{[]string{"context=system_u:object_r:container_file_t:s0", "context=system_u:object_r:container_file_t:s1"}, false, false},
		{[]string{`context="system_u:object_r:container_file_t:s0:c0,c1`}, false, false},
		{[]string{`context="system_u:object_r:container_file_t:s0:c0,c1",rw`}, true, false},
		{[]string{`noatime="a,b"`}, false, false},
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

func TestSplitMountOptions(t *testing.T) {
	tests := []struct {
		list string
		want []string // nil: refused
	}{
		{"noatime", []string{"noatime"}},
		{"noatime,nodev", []string{"noatime", "nodev"}},
		{"noatime,", []string{"noatime", ""}},
		{"", []string{""}},
		{`context="system_u:object_r:container_file_t:s0:c0,c1"`, []string{`context="system_u:object_r:container_file_t:s0:c0,c1"`}},
		{`ro,context="a:b:c:s0:c0,c1",fscontext="a:b:c:s0:c2,c3"`, []string{"ro", `context="a:b:c:s0:c0,c1"`, `fscontext="a:b:c:s0:c2,c3"`}},
		{`context="a:b:c:s0:c0,c1`, nil},
		{`context=a:b:c:s0:c0",c1`, nil},
	}
	for _, tc := range tests {
		got, err := splitMountOptions(tc.list)
		if tc.want == nil {
			if err == nil {
				t.Errorf("splitMountOptions(%q) = %q, want an error", tc.list, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitMountOptions(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
}

func TestWithoutSELinuxContexts(t *testing.T) {
	const c = `context="system_u:object_r:container_file_t:s0:c0,c1"`
	for _, tc := range []struct{ flags, want []string }{
		{nil, nil},
		{[]string{c}, nil},
		{[]string{"noatime", c}, []string{"noatime"}},
		{[]string{"nodev," + c + ",noexec", "rootcontext=a:b:c"}, []string{"nodev,noexec"}},
	} {
		if got := withoutSELinuxContexts(tc.flags); !slices.Equal(got, tc.want) {
			t.Errorf("withoutSELinuxContexts(%q) = %q, want %q", tc.flags, got, tc.want)
		}
	}
}
