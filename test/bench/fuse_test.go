package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestCompareRows: samples pair by round (and by stage within it), a rate's cost is loop's rate over fuse's,
// a time's is fuse's over loop's, and a measure loop spends nothing on gets no ratio.
func TestCompareRows(t *testing.T) {
	p := podIO{Bytes: 64 << 20, SyncEvery: 16}
	run := func(backend string, stage []float64, seqRead ioSample) *runResult {
		seqRead.Workload = wSeqRead
		return &runResult{Backend: backend, StageMS: map[string][]float64{"ext4": stage}, IO: []ioSample{seqRead}}
	}
	results := map[string][]*runResult{
		"loop": {run("loop", []float64{10, 20}, ioSample{Bytes: 1 << 30, Ops: 1024, Seconds: 1, MachineCPU: 1}),
			run("loop", []float64{10, 10}, ioSample{Bytes: 1 << 30, Ops: 1024, Seconds: 2, MachineCPU: 1})},
		"fuse": {run("fuse", []float64{15, 20}, ioSample{Bytes: 1 << 30, Ops: 1024, Seconds: 2, FakecloudCPU: 0.5, MachineCPU: 3}),
			run("fuse", []float64{30, 10}, ioSample{Bytes: 1 << 30, Ops: 1024, Seconds: 2, FakecloudCPU: 0.7, MachineCPU: 2})},
	}
	rows := compareRows(results, []string{"ext4", "xfs"}, p, "loop", "fuse")
	want := map[string][]float64{
		"NodeStageVolume ext4 (mkfs + mount)": {1.5, 1, 3, 1},
		p.describe(wSeqRead):                  {2, 1},
		"fakecloud CPU, " + wSeqRead:          nil,
		"machine CPU, " + wSeqRead:            {3, 2},
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
		w, ok := want[r.Name]
		if !ok {
			continue
		}
		if !slices.Equal(r.Cost, w) {
			t.Errorf("%s: cost %v, want %v", r.Name, r.Cost, w)
		}
	}
	for name := range want {
		if !slices.Contains(names, name) {
			t.Errorf("no row %q in %q", name, names)
		}
	}
	for _, n := range names {
		if strings.Contains(n, "xfs") || strings.Contains(n, wRandRead1) {
			t.Errorf("row %q has no samples and should be left out", n)
		}
	}

	var out bytes.Buffer
	printComparison(&out, &fuseBench{runs: 2, sizeGiB: 1, stages: 2, ioFS: "ext4", io: p}, rows,
		[]*rssResult{{Backend: "fuse", Volumes: 100, Instances: 4, HWMMiB: 250, IOSeconds: 1}})
	// median takes the upper of two middle values.
	for _, s := range []string{"— (loop: 0)", "1.50× (1.00×–3.00×)", "2.00× (1.00×–2.00×)",
		"fuse costs 1.5× loop or more on 3 of 4 rows", "machine CPU, seq-read 3.00×"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "VmHWM ≤ 200 MiB") && !strings.HasSuffix(strings.TrimSpace(line), " no") {
			t.Errorf("250 MiB is over the target: %q", line)
		}
	}
}

func TestFlagListed(t *testing.T) {
	help := "Usage of fakecloud:\n  -backend string\n    \tblock backend\n  -no-fsync\n    \tskip fsync\n  -io-limitsx\n"
	tests := []struct {
		name string
		want bool
	}{{"backend", true}, {"no-fsync", true}, {"io-limits", false}, {"fsync", false}}
	for _, tt := range tests {
		if got := flagListed(help, tt.name); got != tt.want {
			t.Errorf("flagListed(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseMountsUnder(t *testing.T) {
	info := `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 7:1 / /tmp/fb-1/staging/vol-1 rw - ext4 /dev/loop1 rw
31 22 7:1 / /tmp/fb-1/pods/vol-1/mount rw - ext4 /dev/loop1 rw
32 22 0:50 / /tmp/fb-1/fakecloud/fuse rw - fuse.fakecloud fakecloud rw
33 22 7:2 / /tmp/fb-10/staging/vol-2 rw - ext4 /dev/loop2 rw
`
	got, err := parseMountsUnder(strings.NewReader(info), "/tmp/fb-1/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/tmp/fb-1/pods/vol-1/mount", "/tmp/fb-1/staging/vol-1", "/tmp/fb-1/fakecloud/fuse"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
