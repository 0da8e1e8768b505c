package ec2cloud

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// benchCase is one shape of BenchmarkConcurrentCycles: workers run cycles each, one after the other.
type benchCase struct {
	name       string
	workers    int
	cycles     int
	transition time.Duration
	apiLatency time.Duration
	unbatched  bool
}

// BenchmarkConcurrentCycles runs create → attach → detach → delete cycles against fakecloud, with the
// production wait and retry defaults, and reports EC2 calls per cycle (total and per action, counted per HTTP
// attempt by the client's metrics and cross-checked against fakecloud's own counter), p50/p99 latency per
// operation and the mean time spent waiting per operation. The 100-way cases are the issue's; the unbatched
// ones show what coalescing the waits' Describe calls saves; the 1-way ones show the latency of an idle cloud. Run with -benchtime=1x (and -v for the table):
//
//	go test ./pkg/cloud/ec2cloud -run '^$' -bench ConcurrentCycles -benchtime=1x -v
func BenchmarkConcurrentCycles(b *testing.B) {
	for _, bc := range []benchCase{
		{name: "transitions=0/concurrency=100", workers: 100, cycles: 1},
		{name: "transitions=200ms/concurrency=100", workers: 100, cycles: 1, transition: 200 * time.Millisecond},
		{name: "transitions=200ms/api=20ms/concurrency=100", workers: 100, cycles: 1, transition: 200 * time.Millisecond,
			apiLatency: 20 * time.Millisecond},
		{name: "transitions=0/concurrency=100/unbatched", workers: 100, cycles: 1, unbatched: true},
		{name: "transitions=200ms/concurrency=100/unbatched", workers: 100, cycles: 1, transition: 200 * time.Millisecond, unbatched: true},
		{name: "transitions=0/concurrency=1", workers: 1, cycles: 10},
		{name: "transitions=200ms/concurrency=1", workers: 1, cycles: 5, transition: 200 * time.Millisecond},
	} {
		b.Run(bc.name, func(b *testing.B) { benchCycles(b, bc) })
	}
}

func benchCycles(b *testing.B, bc benchCase) {
	transition, apiLatency := bc.transition, bc.apiLatency
	cfg := fakecloud.DefaultCloud()
	// Four nodes, 25 volumes each at a time.
	cfg.Instances = []state.InstanceSpec{
		{ID: "i-0a000000000000001", Zone: zoneA, AttachmentLimit: 32},
		{ID: "i-0a000000000000002", Zone: zoneA, AttachmentLimit: 32},
		{ID: "i-0b000000000000001", Zone: zoneB, AttachmentLimit: 32},
		{ID: "i-0c000000000000001", Zone: "us-east-1c", AttachmentLimit: 32},
	}
	fo := fakecloudtest.Options{Cloud: &cfg, NoSync: true, Durations: state.Durations{
		VolumeCreate: transition, VolumeDelete: transition, Attach: transition, Detach: transition,
	}}
	if apiLatency > 0 {
		fo.Faults = faults.Config{Latency: map[string]faults.Duration{faults.AllActions: faults.Duration(apiLatency)}}
	}
	fc := fakecloudtest.Start(b, fo)
	reg := prometheus.NewRegistry()
	c, err := New(context.Background(), Options{Endpoint: fc.URL, Region: fc.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey, Registerer: reg,
		AttachStuckTimeout: DefaultAttachStuckTimeout})
	if err != nil {
		b.Fatal(err)
	}
	c.unbatched = bc.unbatched
	ops := []string{"create", "attach", "detach", "delete", "cycle"}
	lat := map[string][]time.Duration{}
	var mu sync.Mutex
	record := func(op string, d time.Duration) {
		mu.Lock()
		lat[op] = append(lat[op], d)
		mu.Unlock()
	}
	before := fakecloudCalls(b, fc.URL)

	b.ResetTimer()
	for iter := range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, bc.workers*bc.cycles)
		for i := range bc.workers {
			inst := cfg.Instances[i%len(cfg.Instances)]
			wg.Go(func() {
				for j := range bc.cycles {
					name := fmt.Sprintf("bench-%d-%d-%d", iter, i, j)
					if err := benchCycle(c, name, inst, record); err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Error(err)
		}
	}
	b.StopTimer()

	cycles := float64(b.N * bc.workers * bc.cycles)
	calls := requestCounts(b, reg)
	server := fakecloudCalls(b, fc.URL)
	serverTotal := server["total"] - before["total"]
	b.ReportMetric(calls["total"]/cycles, "calls/cycle")
	b.ReportMetric(serverTotal/cycles, "server-calls/cycle")
	var actions []string
	for k := range calls {
		if k != "total" && !strings.Contains(k, "/") {
			actions = append(actions, k)
		}
	}
	slices.Sort(actions)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%s: %d cycles, %d-way, transitions %s, API latency %s: %.0f EC2 calls (server counted %.0f), %.2f per cycle\n",
		bc.name, int(cycles), bc.workers, transition, apiLatency, calls["total"], serverTotal, calls["total"]/cycles)
	mean := meanHistogram(b, reg, metricDuration, "action", nil)
	waits := meanHistogram(b, reg, metricWait, "operation", map[string]string{"result": "done"})
	for _, a := range actions {
		fmt.Fprintf(&table, "  %-28s %5.0f  (%.2f/cycle, mean %.1f ms per call)\n", a, calls[a], calls[a]/cycles, mean[a])
		b.ReportMetric(calls[a]/cycles, a+"/cycle")
	}
	for _, op := range ops {
		d := lat[op]
		slices.Sort(d)
		if len(d) == 0 {
			continue
		}
		p50, p99 := d[len(d)*50/100], d[min(len(d)-1, len(d)*99/100)]
		fmt.Fprintf(&table, "  %-8s p50 %7.1f ms  p99 %7.1f ms", op, ms(p50), ms(p99))
		if w, ok := waits[op]; ok {
			fmt.Fprintf(&table, "  (mean wait after the call %.1f ms)", w)
		}
		table.WriteString("\n")
		b.ReportMetric(ms(p50), op+"-p50-ms")
		b.ReportMetric(ms(p99), op+"-p99-ms")
	}
	b.Log(table.String())
}

func benchCycle(c *Cloud, name string, inst state.InstanceSpec, record func(string, time.Duration)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	t := start
	step := func(op string) {
		now := time.Now()
		record(op, now.Sub(t))
		t = now
	}
	d, err := c.CreateDisk(ctx, name, cloud.DiskOptions{Zone: inst.Zone, SizeGiB: 1})
	if err != nil {
		return err
	}
	step("create")
	if _, err := c.AttachDisk(ctx, d.ID, inst.ID); err != nil {
		return err
	}
	step("attach")
	if err := c.DetachDisk(ctx, d.ID, inst.ID); err != nil {
		return err
	}
	step("detach")
	if err := c.DeleteDisk(ctx, d.ID); err != nil {
		return err
	}
	step("delete")
	record("cycle", time.Since(start))
	return nil
}

// meanHistogram gives the mean of a histogram in ms by the value of key, over the series matching where.
func meanHistogram(tb testing.TB, reg prometheus.Gatherer, name, key string, where map[string]string) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sum, count := map[string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range where {
				if label(m, k) != v {
					continue series
				}
			}
			sum[label(m, key)] += m.GetHistogram().GetSampleSum()
			count[label(m, key)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	out := map[string]float64{}
	for k, n := range count {
		if n > 0 {
			out[k] = 1000 * sum[k] / n
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fakecloudCalls scrapes fakecloud's own request counter, by action and in total.
func fakecloudCalls(tb testing.TB, url string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		tb.Fatalf("scrape fakecloud: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "diskforge_fakecloud_requests_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "diskforge_fakecloud_requests_total{"), "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(labels, ",") {
			if k, val, _ := strings.Cut(kv, "="); k == "action" {
				out[strings.Trim(val, `"`)] += v
			}
		}
		out["total"] += v
	}
	return out
}
