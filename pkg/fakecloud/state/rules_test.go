package state

import (
	"strings"
	"testing"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

func i32(n int32) *int32 { return &n }

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"a*", "abc", true},
		{"*c", "abc", true},
		{"a*c", "ac", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"", "", true},
		{"", "a", false},
		{"*b*", "aaabaaa", true},
		{"**x", "x", true},
	}
	for _, tc := range cases {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestIDIndex(t *testing.T) {
	var x idIndex
	for _, id := range []string{"vol-c", "vol-a", "vol-b", "vol-a"} {
		x.insert(id)
	}
	if got := strings.Join(x.ids, ","); got != "vol-a,vol-b,vol-c" {
		t.Fatalf("ids = %s", got)
	}
	if got := strings.Join(x.after("vol-a"), ","); got != "vol-b,vol-c" {
		t.Errorf("after(vol-a) = %s", got)
	}
	// A token whose resource was deleted still pages from where it was.
	x.remove("vol-b")
	if got := strings.Join(x.after("vol-b"), ","); got != "vol-c" {
		t.Errorf("after removed = %s", got)
	}
}

func TestVolumeSpecSettle(t *testing.T) {
	cases := []struct {
		name       string
		spec       volumeSpec
		iops, tp   int32
		code, text string
	}{
		{"gp2 baseline floor", volumeSpec{Type: "gp2", SizeGiB: 10}, 100, 0, "", ""},
		{"gp2 baseline 3 per GiB", volumeSpec{Type: "gp2", SizeGiB: 1000}, 3000, 0, "", ""},
		{"gp2 baseline cap", volumeSpec{Type: "gp2", SizeGiB: 16000}, 16000, 0, "", ""},
		{"gp3 defaults", volumeSpec{Type: "gp3", SizeGiB: 1}, 3000, 125, "", ""},
		{"gp3 baseline at any size", volumeSpec{Type: "gp3", SizeGiB: 1, Iops: i32(3000)}, 3000, 125, "", ""},
		{"gp3 ratio", volumeSpec{Type: "gp3", SizeGiB: 8, Iops: i32(4001)}, 0, 0, ec2err.CodeInvalidParameterValue, "maximum is 500"},
		{"gp3 throughput per iops", volumeSpec{Type: "gp3", SizeGiB: 100, Iops: i32(3000), Throughput: i32(1000)}, 0, 0, ec2err.CodeInvalidParameterValue, "maximum is 0.25"},
		{"io2 max", volumeSpec{Type: "io2", SizeGiB: 300, Iops: i32(256000)}, 256000, 0, "", ""},
		{"io2 over max", volumeSpec{Type: "io2", SizeGiB: 300, Iops: i32(256001)}, 0, 0, ec2err.CodeInvalidParameterValue, "maximum is 256000"},
		{"io1 multi-attach", volumeSpec{Type: "io1", SizeGiB: 4, Iops: i32(100), MultiAttach: true}, 100, 0, "", ""},
		{"sc1 iops", volumeSpec{Type: "sc1", SizeGiB: 500, Iops: i32(100)}, 0, 0, ec2err.CodeInvalidParameterCombination, "iops"},
		{"standard max", volumeSpec{Type: "standard", SizeGiB: 1025}, 0, 0, ec2err.CodeInvalidParameterValue, "maximum is 1024GiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			iops, tp, err := tc.spec.settle()
			if tc.code != "" {
				if !ec2err.HasCode(err, tc.code) || !strings.Contains(err.Error(), tc.text) {
					t.Errorf("err = %v, want %s with %q", err, tc.code, tc.text)
				}
				return
			}
			if err != nil || iops != tc.iops || tp != tc.tp {
				t.Errorf("settle = %d, %d, %v; want %d, %d", iops, tp, err, tc.iops, tc.tp)
			}
		})
	}
}

func TestPageLimits(t *testing.T) {
	var x idIndex
	for _, id := range []string{"vol-1", "vol-2", "vol-3", "vol-4", "vol-5", "vol-6", "vol-7"} {
		x.insert(id)
	}
	odd := func(id string) bool { return id[len(id)-1]%2 == 1 }
	got, next, err := volumePages.page(&x, Page{MaxResults: i32(5)}, false, func(string) bool { return true })
	if err != nil || len(got) != 5 || next == "" {
		t.Fatalf("first page = %v, %q, %v", got, next, err)
	}
	got, next, err = volumePages.page(&x, Page{MaxResults: i32(5), NextToken: next}, false, func(string) bool { return true })
	if err != nil || strings.Join(got, ",") != "vol-6,vol-7" || next != "" {
		t.Errorf("last page = %v, %q, %v", got, next, err)
	}
	// Filters apply before the page is cut, so a page holds MaxResults matches when there are that many.
	got, _, _ = volumePages.page(&x, Page{MaxResults: i32(5)}, false, odd)
	if strings.Join(got, ",") != "vol-1,vol-3,vol-5,vol-7" {
		t.Errorf("filtered page = %v", got)
	}
	// Exactly a page of matches left: no token for an empty page after it.
	got, next, _ = volumePages.page(&x, Page{MaxResults: i32(5), NextToken: encodeToken("vol-2")}, false, func(string) bool { return true })
	if len(got) != 5 || next != "" {
		t.Errorf("exact last page = %v, token %q", got, next)
	}
}
