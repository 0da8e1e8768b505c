package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// costLimit is issue #25's rule: the fuse backend becomes the default only if it costs less than this many
// times the loop backend on every row.
const costLimit = 1.5

// compareRow is one measure of both backends, samples paired by index (the same round and, for stages, the
// same position in it), and what the second backend costs against the first: per pair, its time or CPU over
// the first's (for a rate, the first's rate over its own), so above 1 it is dearer.
type compareRow struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// HigherBetter marks rates (MiB/s, IOPS); the others are times or CPU seconds.
	HigherBetter bool      `json:"higherBetter"`
	Base         []float64 `json:"base"`
	Other        []float64 `json:"other"`
	Cost         []float64 `json:"cost"`
}

func (r compareRow) costOf(base, other float64) float64 {
	if r.HigherBetter {
		return base / other
	}
	return other / base
}

// compareRows turns the rounds of two backends into rows: NodeStageVolume per filesystem, then per pod
// workload its rate, fakecloud's CPU seconds per GiB moved and the machine's.
func compareRows(results map[string][]*runResult, fsTypes []string, p podIO, base, other string) []compareRow {
	bs, ots := results[base], results[other]
	n := min(len(bs), len(ots))
	var rows []compareRow
	add := func(r compareRow, get func(*runResult) []float64) {
		for i := range n {
			b, o := get(bs[i]), get(ots[i])
			for k := range min(len(b), len(o)) {
				r.Base, r.Other = append(r.Base, b[k]), append(r.Other, o[k])
				// No ratio to nothing: the loop backend's fakecloud does no work on I/O (the kernel's loop
				// workers do), which the machine's CPU rows count.
				if c := r.costOf(b[k], o[k]); !math.IsInf(c, 0) && !math.IsNaN(c) {
					r.Cost = append(r.Cost, c)
				}
			}
		}
		if len(r.Base) > 0 {
			rows = append(rows, r)
		}
	}
	for _, fs := range fsTypes {
		add(compareRow{Name: "NodeStageVolume " + fs + " (mkfs + mount)", Unit: "ms"},
			func(r *runResult) []float64 { return r.StageMS[fs] })
	}
	sample := func(r *runResult, w string) (ioSample, bool) {
		i := slices.IndexFunc(r.IO, func(s ioSample) bool { return s.Workload == w })
		if i < 0 {
			return ioSample{}, false
		}
		return r.IO[i], true
	}
	per := func(w string, f func(ioSample) float64) func(*runResult) []float64 {
		return func(r *runResult) []float64 {
			if s, ok := sample(r, w); ok && s.Seconds > 0 && s.Bytes > 0 {
				return []float64{f(s)}
			}
			return nil
		}
	}
	for _, w := range podWorkloads {
		rate := compareRow{Name: p.describe(w), Unit: "IOPS", HigherBetter: true}
		f := func(s ioSample) float64 { return float64(s.Ops) / s.Seconds }
		if w == wSeqWrite || w == wSeqRead {
			rate.Unit, f = "MiB/s", func(s ioSample) float64 { return float64(s.Bytes) / (1 << 20) / s.Seconds }
		}
		add(rate, per(w, f))
	}
	for _, w := range podWorkloads {
		add(compareRow{Name: "fakecloud CPU, " + w, Unit: "s/GiB"}, per(w, func(s ioSample) float64 { return s.FakecloudCPU / s.gib() }))
	}
	for _, w := range podWorkloads {
		add(compareRow{Name: "machine CPU, " + w, Unit: "s/GiB"}, per(w, func(s ioSample) float64 { return s.MachineCPU / s.gib() }))
	}
	return rows
}

// printComparison writes the side-by-side table, the rows at or over the cost limit, and the memory table.
func printComparison(w io.Writer, b *fuseBench, rows []compareRow, mem []*rssResult) {
	if len(rows) > 0 {
		printRows(w, b, rows)
	}
	if len(mem) > 0 {
		printMemory(w, b, mem)
	}
}

func printRows(w io.Writer, b *fuseBench, rows []compareRow) {
	fmt.Fprintf(w, "\nfuse against loop: %d round(s), %d GiB volumes, %d stage(s) per filesystem per round; pod I/O on %s\n",
		b.runs, b.sizeGiB, b.stages, b.ioFS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tunit\tloop median (range)\tfuse median (range)\tfuse cost × loop, median of pairs (range)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Unit, spread(r.Base), spread(r.Other), spreadX(r.Cost))
	}
	_ = tw.Flush()
	var over []string
	for _, r := range rows {
		if len(r.Cost) > 0 && median(r.Cost) >= costLimit {
			over = append(over, fmt.Sprintf("%s %.2f×", r.Name, median(r.Cost)))
		}
	}
	if len(over) == 0 {
		fmt.Fprintf(w, "fuse costs under %.1f× loop on every row\n", costLimit)
	} else {
		fmt.Fprintf(w, "fuse costs %.1f× loop or more on %d of %d rows: %s\n", costLimit, len(over), len(rows), strings.Join(over, "; "))
	}
}

func printMemory(w io.Writer, b *fuseBench, mem []*rssResult) {
	fmt.Fprintf(w, "\nfakecloud's memory (MiB): %d volumes attached over %d instance(s), staged (ext4), each with a %d MiB file, then %d s of 4 KiB O_DIRECT random reads and writes (half each, fdatasync every %d writes) on all at once\n",
		mem[0].Volumes, mem[0].Instances, b.rss.FileMiB, b.rss.Seconds, b.rss.SyncEvery)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "\t"
	for _, m := range mem {
		head += m.Backend + "\t"
	}
	fmt.Fprintln(tw, head)
	line := func(name string, f func(*rssResult) string) {
		s := name + "\t"
		for _, m := range mem {
			s += f(m) + "\t"
		}
		fmt.Fprintln(tw, s)
	}
	line("VmRSS started, no volume", func(m *rssResult) string { return num(m.IdleMiB) })
	line("VmRSS all staged, before I/O", func(m *rssResult) string { return num(m.StagedMiB) })
	line("VmRSS peak under I/O (100 ms samples)", func(m *rssResult) string { return num(m.IOPeakMiB) })
	line("VmHWM, peak of the whole run", func(m *rssResult) string { return num(m.HWMMiB) })
	line("I/O: IOPS over all volumes", func(m *rssResult) string { return num(float64(m.Ops) / m.IOSeconds) })
	line("fakecloud CPU s during the I/O", func(m *rssResult) string { return num(m.FakecloudCPU) })
	line("setup s (create, attach, stage, write)", func(m *rssResult) string { return num(m.SetupSeconds) })
	line("VmHWM ≤ 200 MiB (issue #25)", func(m *rssResult) string {
		if m.HWMMiB <= 200 {
			return "yes"
		}
		return "no"
	})
	_ = tw.Flush()
}

func spread(v []float64) string {
	if len(v) == 1 {
		return num(v[0])
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(slices.Min(v)), num(slices.Max(v)))
}

func spreadX(v []float64) string {
	x := func(f float64) string { return num(f) + "×" }
	switch len(v) {
	case 0:
		return "— (loop: 0)"
	case 1:
		return x(v[0])
	}
	return fmt.Sprintf("%s (%s–%s)", x(median(v)), x(slices.Min(v)), x(slices.Max(v)))
}

// num prints three significant figures or so.
func num(f float64) string {
	switch a := math.Abs(f); {
	case math.IsInf(f, 0) || math.IsNaN(f):
		return fmt.Sprint(f)
	case a >= 100:
		return fmt.Sprintf("%.0f", f)
	case a >= 10:
		return fmt.Sprintf("%.1f", f)
	case a >= 1:
		return fmt.Sprintf("%.2f", f)
	default:
		return fmt.Sprintf("%.3f", f)
	}
}
