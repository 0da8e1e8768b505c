package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// profile is how long fakecloud's transitions take, and how the cycles arrive: all at once (a burst), or
// evenly over Spread, as a provisioner sees PVCs come in a stream. Cycles, when set, replaces --cycles.
type profile struct {
	Name       string        `json:"name"`
	Transition time.Duration `json:"-"`
	Spread     time.Duration `json:"-"`
	Cycles     int           `json:"-"`
}

var profiles = []profile{{Name: "instant"}, {Name: "1s", Transition: time.Second},
	// 10 cycles a second: waits overlap, and batching shares their polls.
	{Name: "1s-stream", Transition: time.Second, Spread: 10 * time.Second},
	// One cycle every half second: few waits overlap, as when PVCs trickle in.
	{Name: "1s-trickle", Transition: time.Second, Spread: 10 * time.Second, Cycles: 20}}

// benchZones are fakecloud's zones; instance i is in zone i mod 3.
var benchZones = []string{"us-east-1a", "us-east-1b", "us-east-1c"}

// benchProcs are the processes whose CPU time a run reports.
var benchProcs = []string{"driver", "fakecloud"}

// rpcs are the steps of a cycle, in order.
var rpcs = []string{"CreateVolume", "ControllerPublishVolume", "ControllerUnpublishVolume", "DeleteVolume"}

// result is one run of one driver on one profile.
type result struct {
	Driver  string `json:"driver"`
	Profile string `json:"profile"`
	// Start is "cold" (the burst measured is the driver's first) or "warm" (--warmups unmeasured bursts of as
	// many cycles ran first, so the driver knows its nodes and how long transitions take, as a driver that has
	// run for a while does).
	Start         string             `json:"start"`
	Run           int                `json:"run"`
	Cycles        int                `json:"cycles"`
	Nodes         int                `json:"nodes"`
	Errors        int                `json:"errors"`
	FirstErrors   []string           `json:"firstErrors,omitempty"`
	WallSeconds   float64            `json:"wallSeconds"`
	CallsPerCycle float64            `json:"callsPerCycle"`
	Calls         map[string]float64 `json:"calls"`
	CallErrors    map[string]float64 `json:"callErrors,omitempty"`
	// ServerMeanMS is fakecloud's own mean time per call of each action, in ms: what the cloud costs, apart
	// from what the driver adds.
	ServerMeanMS map[string]float64 `json:"serverMeanMs"`
	// CPUMSPerCycle is the CPU time the driver and fakecloud used in the burst, in ms per cycle: what the
	// cycles cost the two cores they share, which latency on a noisy machine shows only blurred.
	CPUMSPerCycle map[string]float64      `json:"cpuMsPerCycle"`
	Latency       map[string]latencyStats `json:"latency"`
	// Caller is "bench" (each RPC sent once under the cycle's deadline) or "sidecar" (--sidecar: each attempt
	// under the sidecar's --timeout, retryable failures sent again after the sidecar's backoff).
	Caller string `json:"caller"`
	// RateLimits is fakecloud's --rate-limits profile, when one was set, and FakecloudArgs its extra flags.
	RateLimits    string   `json:"rateLimits,omitempty"`
	FakecloudArgs []string `json:"fakecloudArgs,omitempty"`
	// Retries counts the attempts a sidecar caller sent again, by "RPC/code".
	Retries map[string]int `json:"retries,omitempty"`
	// Throttled is how many EC2 calls fakecloud answered RequestLimitExceeded in the burst, and ThrottledShare
	// their share of all its calls.
	Throttled      float64 `json:"throttled"`
	ThrottledShare float64 `json:"throttledShare"`
	// FloorSeconds is the shortest time any client could run the burst under the profile's buckets and
	// transitions (floor), and WallToFloor the measured wall time as a multiple of it.
	FloorSeconds float64 `json:"floorSeconds"`
	WallToFloor  float64 `json:"wallToFloor"`
	// Left counts the driver's volumes fakecloud still holds once every burst of the run is over; Duplicated
	// those of them the caller was never given (a second volume under one name); AttachmentsLeft the
	// attachments they still have.
	Left            int `json:"volumesLeft"`
	Duplicated      int `json:"volumesDuplicated"`
	AttachmentsLeft int `json:"attachmentsLeft"`
	// Restarts are the driver's kills (--kill-driver-at): when, and the EC2 calls the new driver made in its
	// first second and how many of them fakecloud throttled.
	Restarts []restart `json:"restarts,omitempty"`
}

// restart is one SIGKILL of the driver during the burst and what the driver started in its place did first.
type restart struct {
	AtSeconds            float64 `json:"atSeconds"`
	CallsFirstSecond     float64 `json:"callsFirstSecond"`
	ThrottledFirstSecond float64 `json:"throttledFirstSecond"`
}

type latencyStats struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

type controllerBench struct {
	fakecloud string
	drivers   []namedBin
	cycles    int
	nodes     int
	runs      int
	profiles  []profile
	starts    []string
	warmups   int
	keep      bool
	// rateLimits is fakecloud's --rate-limits profile.
	rateLimits string
	// variants are the fakecloud set-ups each driver runs against in every round, side by side.
	variants []fakecloudVariant
	caller   caller
	// deadline bounds each cycle of a sidecar caller, which otherwise retries for ever as the sidecars do.
	deadline time.Duration
	// driverArgs are more driver flags (e.g. --ec2-request-limits).
	driverArgs []string
	// killAt are the times into the measured burst at which the driver is killed (SIGKILL) and started again.
	killAt []time.Duration
}

type namedBin struct{ name, path string }

// fakecloudVariant is one set-up of fakecloud: extra flags (e.g. --fault-error), and the buckets of the
// --rate-limits profile with those of any --fault-rate-limit among them.
type fakecloudVariant struct {
	args   []string
	limits faults.Config
}

// parseVariants reads --fakecloud-args: variants separated by ";", each its flags separated by spaces; an
// empty variant is fakecloud with no extra flags.
func parseVariants(spec, rateLimits string) ([]fakecloudVariant, error) {
	var variants []fakecloudVariant
	for _, item := range strings.Split(spec, ";") {
		args := strings.Fields(item)
		limits, err := rateLimitsOf(rateLimits, args)
		if err != nil {
			return nil, err
		}
		variants = append(variants, fakecloudVariant{args: args, limits: limits})
	}
	return variants, nil
}

// driversFlagHelp is the help of every benchmark's --drivers.
const driversFlagHelp = "drivers to compare as NAME=PATH,… (default: current=<bin>/driver)"

// parseDrivers reads --drivers: NAME=PATH items, or the driver in binDir when spec is empty.
func parseDrivers(spec, binDir string) ([]namedBin, error) {
	if spec == "" {
		spec = "current=" + filepath.Join(binDir, "driver")
	}
	var bins []namedBin
	for _, item := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(item, "=")
		if !ok || name == "" || path == "" || strings.ContainsRune(name, '/') {
			return nil, fmt.Errorf("--drivers: %q is not NAME=PATH", item)
		}
		bins = append(bins, namedBin{name, path})
	}
	return bins, nil
}

func runController(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	binDir := fs.String("bin", "bin", "directory of the fakecloud and driver binaries")
	drivers := fs.String("drivers", "", driversFlagHelp)
	b := &controllerBench{}
	fs.IntVar(&b.cycles, "cycles", 100, "parallel cycles per run")
	fs.IntVar(&b.nodes, "nodes", 10, "instances the volumes are published to")
	fs.IntVar(&b.runs, "runs", 1, "rounds; each round runs every driver on every profile")
	only := fs.String("profiles", "instant,1s,1s-stream,1s-trickle",
		"profiles to run: instant, 1s (all cycles at once), 1s-stream (spread over 10 s), 1s-trickle (20 cycles over 10 s)")
	fs.BoolVar(&b.keep, "keep", false, "keep the logs and data directories")
	fs.IntVar(&b.warmups, "warmups", 2, "unmeasured bursts before a warm measurement")
	starts := fs.String("start", "cold,warm", "measure the driver's first burst (cold), or the one after --warmups unmeasured bursts (warm), or both")
	fs.StringVar(&b.rateLimits, "rate-limits", "", "fakecloud's --rate-limits profile (ec2: EC2's per-action buckets); the floor is computed from it")
	extra := fs.String("fakecloud-args", "", "more fakecloud flags, space separated, e.g. --fault-error=*=0.3:RequestLimitExceeded:before; several set-ups separated by ; run side by side in each round (an empty one: none)")
	fs.BoolVar(&b.caller.sidecar, "sidecar", false,
		"call as the sidecars do: each attempt under the manifests' --timeout, DeadlineExceeded, Aborted, Unavailable and ResourceExhausted retried with their backoff (1 s doubling to 5 min)")
	fs.DurationVar(&b.deadline, "sidecar-deadline", 30*time.Minute, "with --sidecar, when a cycle gives up retrying")
	driverArgs := fs.String("driver-args", "", "more driver flags, space separated, e.g. --ec2-request-limits=*=25/250 (a pacer assuming buckets larger than fakecloud's)")
	killAt := fs.String("kill-driver-at", "", "times into the measured burst, comma separated (e.g. 10s,40s), at which the driver is killed with SIGKILL and started again; with --sidecar, whose retries carry the cycles through")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b.driverArgs = strings.Fields(*driverArgs)
	for _, item := range strings.Split(*killAt, ",") {
		if item == "" {
			continue
		}
		d, err := time.ParseDuration(item)
		if err != nil || d <= 0 {
			return fmt.Errorf("--kill-driver-at: %q is not a positive duration", item)
		}
		b.killAt = append(b.killAt, d)
	}
	if len(b.killAt) > 0 && !b.caller.sidecar {
		return errors.New("--kill-driver-at needs --sidecar: only a caller that retries carries the cycles through a restart")
	}
	b.caller.start, b.caller.max, b.caller.sleep = retryIntervalStart, retryIntervalMax, ctxsleep.Sleep
	var err error
	if b.variants, err = parseVariants(*extra, b.rateLimits); err != nil {
		return err
	}
	for _, st := range strings.Split(*starts, ",") {
		if st != "cold" && st != "warm" {
			return fmt.Errorf("--start: %q is neither cold nor warm", st)
		}
		b.starts = append(b.starts, st)
	}
	b.fakecloud = filepath.Join(*binDir, "fakecloud")
	if b.drivers, err = parseDrivers(*drivers, *binDir); err != nil {
		return err
	}
	for _, p := range profiles {
		if slices.Contains(strings.Split(*only, ","), p.Name) {
			b.profiles = append(b.profiles, p)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	for run := 1; run <= b.runs; run++ {
		for _, p := range b.profiles {
			// Alternate the order between rounds, so no driver always runs first on a warm or cold machine.
			order := slices.Clone(b.drivers)
			if run%2 == 0 {
				slices.Reverse(order)
			}
			for _, st := range b.starts {
				for _, v := range b.variants {
					for _, d := range order {
						r, err := b.run(ctx, d, v, p, st, run)
						if err != nil {
							return fmt.Errorf("%s, %s, %s, %q, run %d: %w", d.name, p.Name, st, v.args, run, err)
						}
						if err := enc.Encode(r); err != nil {
							return err
						}
						fmt.Fprintln(os.Stderr, summary(r))
					}
				}
			}
		}
	}
	return nil
}

// summary is one run in a line, the figures #24's targets name: wall time (against the floor, when the
// profile has one), errors, volumes left and duplicated, calls per cycle and the share throttled, retries,
// and the p50 of CreateVolume and ControllerPublishVolume.
func summary(r *result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", r.Driver, r.Profile, r.Start)
	if len(r.FakecloudArgs) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(r.FakecloudArgs, " "))
	}
	fmt.Fprintf(&b, ": %d cycles in %.1f s", r.Cycles, r.WallSeconds)
	if r.FloorSeconds > 0 {
		fmt.Fprintf(&b, ", floor %.1f s: %.2f× the floor", r.FloorSeconds, r.WallToFloor)
	}
	retries := 0
	for _, n := range r.Retries {
		retries += n
	}
	fmt.Fprintf(&b, "; %d errors, %d volumes left, %d duplicated, %d attachments left; %.2f calls/cycle, %.0f throttled (%.1f %%); %d retries",
		r.Errors, r.Left, r.Duplicated, r.AttachmentsLeft, r.CallsPerCycle, r.Throttled, 100*r.ThrottledShare, retries)
	if len(r.Restarts) > 0 {
		fmt.Fprintf(&b, "; %d driver restarts", len(r.Restarts))
	}
	fmt.Fprintf(&b, "; p50 CreateVolume %.3f s, ControllerPublishVolume %.3f s",
		r.Latency["CreateVolume"].P50, r.Latency["ControllerPublishVolume"].P50)
	return b.String()
}

func (b *controllerBench) instances() (ids []string, spec string) {
	var items []string
	for i := range b.nodes {
		id := fmt.Sprintf("i-0be%014d", i)
		ids = append(ids, id)
		items = append(items, fmt.Sprintf("%s=%s:39", id, benchZones[i%len(benchZones)]))
	}
	return ids, strings.Join(items, ",")
}

func (b *controllerBench) run(ctx context.Context, d namedBin, v fakecloudVariant, p profile, start string, run int) (*result, error) {
	dir, err := os.MkdirTemp("", "diskforge-bench-")
	if err != nil {
		return nil, err
	}
	if !b.keep {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	pr := &procs{dir: dir}
	defer pr.stop()
	ids, spec := b.instances()
	t := p.Transition.String()
	args := []string{"--instances", spec, "--create-duration", t, "--attach-duration", t, "--detach-duration", t, "--delete-duration", "0s"}
	if b.rateLimits != "" {
		args = append(args, "--rate-limits", b.rateLimits)
	}
	url, err := pr.startFakecloud(ctx, b.fakecloud, append(args, v.args...)...)
	if err != nil {
		return nil, err
	}
	conn, err := pr.startDriver(ctx, d.path, append([]string{"--mode", "controller", "--cloud-endpoint", url, "--region", "us-east-1"}, b.driverArgs...)...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctrl := csi.NewControllerClient(conn)
	if p.Cycles == 0 {
		p.Cycles = b.cycles
	}
	cycles := p.Cycles
	given := map[string]string{} // volume ID each name's CreateVolume answered, over every burst of the run
	if start == "warm" {
		// All at once: the warm-up only has to teach the driver, not to take as long as the measured burst.
		warmup := p
		warmup.Spread = 0
		for i := range b.warmups {
			w := b.burst(ctx, ctrl, ids, warmup, fmt.Sprintf("pvc-warm-%d-%d", run, i))
			if len(w.errs) > 0 {
				return nil, fmt.Errorf("warm-up: %d errors, first: %s", len(w.errs), w.errs[0])
			}
			maps.Copy(given, w.given)
		}
		// The warm-ups drained the buckets; the measured burst, like the floor, starts with them full.
		if err := refillBuckets(ctx, url); err != nil {
			return nil, err
		}
	}

	before, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	cpuBefore, err := pr.cpuOf(benchProcs)
	if err != nil {
		return nil, err
	}
	killed := make(chan []restart, 1)
	go func() { killed <- b.kills(ctx, pr, url) }()
	m := b.burst(ctx, ctrl, ids, p, fmt.Sprintf("pvc-bench-%d", run))
	restarts := <-killed
	cpuAfter, err := pr.cpuOf(benchProcs)
	if err != nil {
		return nil, err
	}
	after, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	maps.Copy(given, m.given)
	left, duplicated, attachments, err := checkVolumes(ctx, url, given)
	if err != nil {
		return nil, err
	}

	r := &result{Driver: d.name, Profile: p.Name, Start: start, Run: run, Cycles: cycles, Nodes: b.nodes, Errors: len(m.errs),
		WallSeconds: round(m.wall.Seconds()), Calls: map[string]float64{}, CallErrors: map[string]float64{}, ServerMeanMS: map[string]float64{}, Latency: map[string]latencyStats{}, CPUMSPerCycle: map[string]float64{},
		Caller: "bench", RateLimits: v.limits.RateLimitProfile, FakecloudArgs: v.args, Left: left, Duplicated: duplicated,
		AttachmentsLeft: attachments, Restarts: restarts}
	if b.caller.sidecar {
		r.Caller, r.Retries = "sidecar", m.retries
	}
	fl := floor(v.limits, cycles, p)
	r.FloorSeconds = round(fl.Seconds())
	if fl > 0 {
		r.WallToFloor = round(m.wall.Seconds() / fl.Seconds())
	}
	var total float64
	for k, v := range after {
		n := v - before[k]
		switch {
		case k == "total":
			total = n
		case strings.HasSuffix(k, "/"+ec2err.CodeRequestLimitExceeded):
			r.Throttled += n
		}
	}
	if total > 0 {
		r.ThrottledShare = round(r.Throttled / total)
	}
	for i, name := range benchProcs {
		if name == "driver" && len(restarts) > 0 {
			continue // the driver's CPU time before a restart is gone with the process
		}
		r.CPUMSPerCycle[name] = round(float64(cpuAfter[i]-cpuBefore[i]) / float64(time.Millisecond) / float64(cycles))
	}
	for k, v := range after {
		n := v - before[k]
		switch {
		case n == 0:
		case strings.HasPrefix(k, "seconds:"):
			action := strings.TrimPrefix(k, "seconds:")
			if calls := after[action] - before[action]; calls > 0 {
				r.ServerMeanMS[action] = round(1000 * n / calls)
			}
		case k == "total":
			r.CallsPerCycle = round(n / float64(cycles))
		case !strings.Contains(k, "/"):
			r.Calls[k] = round(n / float64(cycles))
		case !strings.HasSuffix(k, "/Success"):
			r.CallErrors[k] = n
		}
	}
	for _, rpc := range rpcs {
		if d := m.lat[rpc]; len(d) > 0 {
			r.Latency[rpc] = percentiles(d)
		}
	}
	r.FirstErrors = m.errs[:min(len(m.errs), 5)]
	return r, nil
}

// kills kills the driver (SIGKILL) at each of b.killAt into the burst that starts now and starts it again on
// the same socket, where the caller's connection finds it; it returns, per restart, the calls fakecloud saw
// in the new driver's first second. A failed restart ends the kills; the burst's errors then tell.
func (b *controllerBench) kills(ctx context.Context, pr *procs, url string) []restart {
	var out []restart
	start := time.Now()
	for _, at := range b.killAt {
		if ctxsleep.Sleep(ctx, time.Until(start.Add(at))) != nil {
			return out
		}
		err := pr.restart("driver")
		// The new driver's first second starts with its first EC2 calls: the caller sends its RPCs again
		// after its own backoff.
		var before, after map[string]float64
		if err == nil {
			before, err = b.callsResumed(ctx, url)
		}
		if err == nil {
			err = ctxsleep.Sleep(ctx, time.Second)
		}
		if err == nil {
			after, err = scrapeCalls(url)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: restart the driver:", err)
			return out
		}
		r := restart{AtSeconds: round(at.Seconds()), CallsFirstSecond: after["total"] - before["total"]}
		for k, v := range after {
			if strings.HasSuffix(k, "/"+ec2err.CodeRequestLimitExceeded) {
				r.ThrottledFirstSecond += v - before[k]
			}
		}
		fmt.Fprintf(os.Stderr, "driver killed at %v: the new driver's first second of calls made %.0f EC2 calls, %.0f throttled\n", at,
			r.CallsFirstSecond, r.ThrottledFirstSecond)
		out = append(out, r)
	}
	return out
}

// callsResumed waits until fakecloud sees EC2 calls again (more than the driver's start makes) and returns its
// counts from just before.
func (b *controllerBench) callsResumed(ctx context.Context, url string) (map[string]float64, error) {
	first, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	last := first
	for {
		if err := ctxsleep.Sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
		now, err := scrapeCalls(url)
		if err != nil {
			return nil, err
		}
		if now["total"]-first["total"] > 2 {
			return last, nil
		}
		last = now
	}
}

// measured is what one burst of cycles took.
type measured struct {
	lat  map[string][]time.Duration
	errs []string
	wall time.Duration
	// retries counts the attempts a sidecar caller sent again, by "RPC/code".
	retries map[string]int
	// given is the volume ID each name's CreateVolume answered.
	given map[string]string
}

// burst runs p.Cycles cycles, spread evenly over p.Spread, round robin over the nodes, and waits for them all.
func (b *controllerBench) burst(ctx context.Context, ctrl csi.ControllerClient, nodes []string, p profile, prefix string) measured {
	var (
		mu sync.Mutex
		m  = measured{lat: map[string][]time.Duration{}, retries: map[string]int{}, given: map[string]string{}}
		wg sync.WaitGroup
	)
	record := func(rpc string, o outcome) {
		mu.Lock()
		defer mu.Unlock()
		m.lat[rpc] = append(m.lat[rpc], o.took)
		if o.err != nil {
			m.errs = append(m.errs, fmt.Sprintf("%s: %v", rpc, grpcErr(o.err)))
		}
		for _, c := range o.retried {
			m.retries[rpc+"/"+c.String()]++
		}
	}
	created := func(name, volumeID string) {
		mu.Lock()
		defer mu.Unlock()
		m.given[name] = volumeID
	}
	start := time.Now()
	for i := range p.Cycles {
		node := i % len(nodes)
		delay := p.Spread * time.Duration(i) / time.Duration(p.Cycles)
		wg.Go(func() {
			time.Sleep(delay)
			b.cycle(ctx, ctrl, fmt.Sprintf("%s-%04d", prefix, i), nodes[node], benchZones[node%len(benchZones)], record, created)
		})
	}
	wg.Wait()
	m.wall = time.Since(start)
	return m
}

// cycle takes one volume through create, publish, unpublish and delete, as the provisioner and attacher do.
func (b *controllerBench) cycle(ctx context.Context, ctrl csi.ControllerClient, name, node, zone string,
	record func(string, outcome), created func(name, volumeID string)) {
	deadline := 2 * time.Minute
	if b.caller.sidecar {
		deadline = b.deadline
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	step := func(rpc string, call func(ctx context.Context) error) bool {
		o := b.caller.call(ctx, rpc, call)
		record(rpc, o)
		return o.err == nil
	}
	var volumeID string
	if !step("CreateVolume", func(ctx context.Context) error {
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
			VolumeCapabilities: []*csi.VolumeCapability{capability}, Parameters: map[string]string{"type": "gp3"},
			AccessibilityRequirements: &csi.TopologyRequirement{Preferred: []*csi.Topology{
				{Segments: map[string]string{"topology.kubernetes.io/zone": zone}}}},
		})
		if err == nil {
			volumeID = resp.GetVolume().GetVolumeId()
			created(name, volumeID)
		}
		return err
	}) {
		return
	}
	if !step("ControllerPublishVolume", func(ctx context.Context) error {
		_, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: node, VolumeCapability: capability})
		return err
	}) {
		return
	}
	step("ControllerUnpublishVolume", func(ctx context.Context) error {
		_, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: node})
		return err
	})
	step("DeleteVolume", func(ctx context.Context) error {
		_, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volumeID})
		return err
	})
}

func grpcErr(err error) error {
	if err == nil {
		return nil
	}
	s, _ := status.FromError(err)
	return fmt.Errorf("%s: %s", s.Code(), s.Message())
}

// percentiles are the p50 and p99 of d, in seconds.
func percentiles(d []time.Duration) latencyStats {
	d = slices.Clone(d)
	slices.Sort(d)
	return latencyStats{P50: round(d[len(d)*50/100].Seconds()), P99: round(d[min(len(d)-1, len(d)*99/100)].Seconds())}
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// modifyResult is one driver's run of the resize scenario: per volume, ControllerExpandVolume and
// ControllerModifyVolume at once (as the resizer sends them when a PVC's size and VolumeAttributesClass
// change together), then another ControllerModifyVolume while that modification is still optimizing.
type modifyResult struct {
	Driver  string             `json:"driver"`
	Volumes int                `json:"volumes"`
	Errors  map[string]int     `json:"errorsByCode"`
	Calls   map[string]float64 `json:"modifyCallsPerVolume"`
	// Refused counts ModifyVolume calls EC2 refused because a modification was in progress.
	Refused    float64                 `json:"refusedModifyVolume"`
	Latency    map[string]latencyStats `json:"latency"`
	WallSecond float64                 `json:"wallSeconds"`
}

func runModify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("modify", flag.ExitOnError)
	binDir := fs.String("bin", "bin", "directory of the fakecloud and driver binaries")
	drivers := fs.String("drivers", "", driversFlagHelp)
	volumes := fs.Int("volumes", 20, "volumes resized in parallel")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bins, err := parseDrivers(*drivers, *binDir)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for _, d := range bins {
		r, err := modifyRun(ctx, filepath.Join(*binDir, "fakecloud"), d.name, d.path, *volumes)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func modifyRun(ctx context.Context, fakecloud, name, driver string, volumes int) (*modifyResult, error) {
	dir, err := os.MkdirTemp("", "diskforge-bench-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pr := &procs{dir: dir}
	defer pr.stop()
	url, err := pr.startFakecloud(ctx, fakecloud, "--create-duration", "0s", "--modifying-duration", "300ms", "--optimizing-duration", "1s")
	if err != nil {
		return nil, err
	}
	conn, err := pr.startDriver(ctx, driver, "--mode", "controller", "--cloud-endpoint", url, "--region", "us-east-1")
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctrl := csi.NewControllerClient(conn)
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	ids := make([]string, volumes)
	for i := range ids {
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-resize-%04d", i),
			CapacityRange: &csi.CapacityRange{RequiredBytes: 10 << 30}, VolumeCapabilities: []*csi.VolumeCapability{capability},
			Parameters: map[string]string{"type": "gp3"}})
		if err != nil {
			return nil, fmt.Errorf("CreateVolume: %w", grpcErr(err))
		}
		ids[i] = resp.GetVolume().GetVolumeId()
	}
	before, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	r := &modifyResult{Driver: name, Volumes: volumes, Errors: map[string]int{}, Calls: map[string]float64{}, Latency: map[string]latencyStats{}}
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	record := func(rpc string, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		lat[rpc] = append(lat[rpc], d)
		if err != nil {
			r.Errors[status.Code(err).String()]++
		}
	}
	timed := func(rpc string, call func() error) {
		t := time.Now()
		err := call()
		record(rpc, time.Since(t), err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			var both sync.WaitGroup
			both.Go(func() {
				timed("ControllerExpandVolume", func() error {
					_, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
						CapacityRange: &csi.CapacityRange{RequiredBytes: 20 << 30}, VolumeCapability: capability})
					return err
				})
			})
			both.Go(func() {
				timed("ControllerModifyVolume", func() error {
					_, err := ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
						MutableParameters: map[string]string{"iops": "4000"}})
					return err
				})
			})
			both.Wait()
			timed("ControllerModifyVolume (next)", func() error {
				_, err := ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id,
					MutableParameters: map[string]string{"throughput": "250"}})
				return err
			})
		})
	}
	wg.Wait()
	r.WallSecond = round(time.Since(start).Seconds())
	after, err := scrapeCalls(url)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"ModifyVolume", "DescribeVolumes", "DescribeVolumesModifications"} {
		r.Calls[k] = round((after[k] - before[k]) / float64(volumes))
	}
	r.Refused = after["ModifyVolume/IncorrectModificationState"] - before["ModifyVolume/IncorrectModificationState"]
	for rpc, d := range lat {
		r.Latency[rpc] = percentiles(d)
	}
	return r, nil
}
