package iolimits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock/fuseblocktest"
)

// TestExceededTime: the time a volume is held by each kind of limit is wall time: one client's waits in a
// row add up, requests held together count once, and a limit that holds nothing adds nothing.
func TestExceededTime(t *testing.T) {
	cases := []struct {
		name       string
		spec       Spec
		sequential bool // the client sleeps each wait before its next request (else all arrive at once)
		size       int64
		n          int
		iops, tput time.Duration
	}{
		{"IOPS, one client", Spec{Type: "io2", SizeGiB: 10, Iops: 100}, true, 4 << 10, 300, 2 * time.Second, 0},
		{"throughput, one client", Spec{Type: "gp3", SizeGiB: 10}, true, 1 << 20, 375, 0, 2 * time.Second},
		// 103 requests at once: the last of the three beyond the bucket waits 30 ms, the three overlap.
		{"IOPS, requests together", Spec{Type: "io2", SizeGiB: 10, Iops: 100}, false, 4 << 10, 103, 30 * time.Millisecond, 0},
		{"within the limits", Spec{Type: "gp3", SizeGiB: 10}, true, 4 << 10, 100, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.sequential, map[string]Spec{"vol-1": tc.spec})
			waits := h.do(t, "vol-1", fuseblock.OpRead, tc.size, tc.n)
			st, ok := h.p.Stats("vol-1")
			if !ok {
				t.Fatal("no stats")
			}
			if !near(st.ExceededIOPS, tc.iops) || !near(st.ExceededThroughput, tc.tput) {
				t.Errorf("exceeded IOPS %v, throughput %v; want %v, %v", st.ExceededIOPS, st.ExceededThroughput, tc.iops, tc.tput)
			}
			if !tc.sequential && len(waits) > 1 && st.ExceededIOPS >= sum(waits) {
				t.Errorf("exceeded %v counts overlapping waits %v more than once", st.ExceededIOPS, waits)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	h := newHarness(t, true, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	h.do(t, "vol-1", fuseblock.OpWrite, 4<<10, 200)
	h.do(t, "vol-gone", fuseblock.OpWrite, 4<<10, 1) // unknown to the lookup: not limited, not reported
	c := h.p.Collector()
	want := `# HELP diskforge_fakecloud_volume_exceeded_iops_seconds_total Time the volume had I/O held at its provisioned IOPS (overlapping waits counted once).
# TYPE diskforge_fakecloud_volume_exceeded_iops_seconds_total counter
diskforge_fakecloud_volume_exceeded_iops_seconds_total{volume_id="vol-1"} 1
# HELP diskforge_fakecloud_volume_exceeded_throughput_seconds_total Time the volume had I/O held at its provisioned throughput (overlapping waits counted once).
# TYPE diskforge_fakecloud_volume_exceeded_throughput_seconds_total counter
diskforge_fakecloud_volume_exceeded_throughput_seconds_total{volume_id="vol-1"} 0
# HELP diskforge_fakecloud_volume_throttled_ios_total I/O requests of the volume held at its provisioned IOPS or throughput.
# TYPE diskforge_fakecloud_volume_throttled_ios_total counter
diskforge_fakecloud_volume_throttled_ios_total{volume_id="vol-1"} 100
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestReportFile: the mount serves each limited volume's exceeded times in its report file beside the volume's
// file, as they are when read; a volume the policy does not limit has none.
func TestReportFile(t *testing.T) {
	h := newHarness(t, true, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	m := fuseblocktest.Serve(t, fuseblock.Chain(fuseblock.NopPolicy{}, h.p))
	m.Create("vol-1", 1<<20)
	m.Create("vol-2", 1<<20)
	report := func(id string) (string, error) {
		b, err := os.ReadFile(filepath.Join(m.FS.MountPoint(), fuseblock.ReportName(id+".img")))
		return string(b), err
	}
	if _, err := report("vol-1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("report before any I/O: %v, want none", err)
	}
	m.Read("vol-1", 0, 4096)
	m.Read("vol-2", 0, 4096)
	want := "exceeded_iops_ns 00000000000000000000\nexceeded_throughput_ns 00000000000000000000\n"
	if got, err := report("vol-1"); err != nil || got != want {
		t.Fatalf("report = %q, %v; want %q", got, err, want)
	}
	h.do(t, "vol-1", fuseblock.OpRead, 4096, 200) // a second's worth beyond the bucket, waited on the fake clock
	st, _ := h.p.Stats("vol-1")
	want = fmt.Sprintf("exceeded_iops_ns %020d\nexceeded_throughput_ns 00000000000000000000\n", st.ExceededIOPS.Nanoseconds())
	if got, err := report("vol-1"); err != nil || got != want || st.ExceededIOPS == 0 {
		t.Fatalf("report = %q, %v; want %q", got, err, want)
	}
	if _, err := report("vol-2"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("report of a volume without limits: %v, want none", err)
	}
}
