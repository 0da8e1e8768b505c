// Package fakecloud assembles the fake EC2 cloud: block backend, persistent state, fault injection, optional
// SigV4 and the HTTP API. cmd/fakecloud and tests of other packages build it through New.
package fakecloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/api"
	"github.com/diskforge/diskforge/pkg/fakecloud/auth"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/hydration"
	"github.com/diskforge/diskforge/pkg/fakecloud/iofaults"
	"github.com/diskforge/diskforge/pkg/fakecloud/iolimits"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/fakecloud/store"
)

// Backend names.
const (
	BackendAuto = "auto"
	BackendLoop = "loop"
	BackendFile = "file"
	// BackendFuse puts fakecloud's own FUSE filesystem between loop devices and volume files, so every block
	// I/O passes through fakecloud. Never chosen by auto.
	BackendFuse = "fuse"
)

// Config is everything fakecloud is made of.
type Config struct {
	DataDir string
	// Backend is loop, fuse, file or auto (loop where root and /dev/loop-control exist).
	Backend string
	// IOPolicy sees every block I/O of the fuse backend's volumes; nil lets all through.
	IOPolicy fuseblock.Policy
	// RestoreReadLatency is what the fuse backend makes a first read of a restored volume's block wait until
	// the background initialization has passed it (package hydration); 0 reads restored volumes at full speed.
	RestoreReadLatency time.Duration
	// IOLimits holds the fuse backend's volumes to their type's and provisioning's IOPS and throughput
	// (package iolimits), after IOPolicy. Off, a benchmark measures the raw backend.
	IOLimits bool
	Cloud    state.Config
	Faults   faults.Config
	// IOFaults are the I/O fault rules at start (--fault-io); they need the fuse backend.
	IOFaults []iofaults.Rule
	// AccessKeys turn SigV4 checking on: access key ID → secret. Empty accepts any request.
	AccessKeys map[string]string
	// AdminToken admits admin requests that carry it as a bearer token. When AccessKeys or AdminToken is set,
	// /admin needs the token or a SigV4 signature by one of the keys; /healthz and /metrics stay open.
	AdminToken string
	// NoSync trades durability of the last change for speed (benchmarks): neither the state store nor new
	// volume and snapshot files are fsynced.
	NoSync bool
	Clock  state.Clock
	// WrapBackend, when set, wraps the block backend: tests slow it down or cut it short.
	WrapBackend func(blockdev.Backend) blockdev.Backend
	// ParamRead, when set, is told the name of every request parameter an action reads (api.Options).
	ParamRead func(action, name string)
}

// DefaultCloud is a region with three zones and no instances.
func DefaultCloud() state.Config {
	return state.Config{
		Region:    "us-east-1",
		Zones:     []state.Zone{{Name: "us-east-1a", ID: "use1-az1"}, {Name: "us-east-1b", ID: "use1-az2"}, {Name: "us-east-1c", ID: "use1-az4"}},
		Durations: state.DefaultDurations(),
		// EC2 keeps a deleted volume's ClientToken bound for a while.
		ClientTokenRetention: state.DefaultClientTokenRetention,
		// EC2 shows a terminated instance for about an hour.
		TerminatedRetention: state.DefaultTerminatedRetention,
		RestoreInitRate:     state.DefaultRestoreInitRate,
	}
}

// Server is a running fakecloud without its listener: serve Handler on any http.Server.
type Server struct {
	State  *state.State
	Faults *faults.Injector
	// IOFaults injects faults into block I/O (fuse backend only; it refuses rules otherwise).
	IOFaults *iofaults.Injector
	Backend  blockdev.Backend
	Handler  http.Handler
	// BackendName is the backend actually chosen (loop, fuse or file).
	BackendName string
	// IOLimits is the I/O limits policy when Config.IOLimits is on (it acts on the fuse backend only).
	IOLimits *iolimits.Policy
	store    *store.Store
}

// New opens the data directory, loads state and builds the handler.
func New(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("a data directory is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	var backendOpts []blockdev.Option
	if cfg.NoSync {
		backendOpts = append(backendOpts, blockdev.NoSync())
	}
	ioFaults, err := newIOFaults(cfg)
	if err != nil {
		return nil, err
	}
	// The I/O policies read state, which needs the backend first: they see it once it exists (requests before
	// that, when Reconcile binds devices, pass). Faults first, so that a refused I/O spends no tokens of a limit.
	var stateRef atomic.Pointer[state.State]
	limits := ioLimits(&stateRef, cfg.IOLimits)
	policy := fuseblock.Chain(ioFaults, cfg.IOPolicy, limitsPolicy(limits), restoreHydration(&stateRef, cfg.RestoreReadLatency))
	backend, name, err := openBackend(cfg.Backend, cfg.DataDir, policy, backendOpts...)
	if err != nil {
		return nil, err
	}
	warnLargestFile(cfg.DataDir)
	if cfg.WrapBackend != nil {
		backend = cfg.WrapBackend(backend)
	}
	inj, err := faults.New(cfg.Faults)
	if err != nil {
		_ = backend.Close()
		return nil, fmt.Errorf("faults: %w", err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "state.db"), store.Options{NoSync: cfg.NoSync})
	if err != nil {
		_ = backend.Close()
		return nil, err
	}
	s, err := state.New(cfg.Cloud, state.Options{Backend: backend, Store: st, Clock: cfg.Clock, Stuck: inj.Stuck, HoldNext: inj.HoldNext})
	if err != nil {
		_ = st.Close()
		_ = backend.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	stateRef.Store(s)
	var verifier api.Authenticator
	if len(cfg.AccessKeys) > 0 {
		verifier = auth.NewVerifier(cfg.AccessKeys)
	}
	reg := prometheus.NewRegistry()
	if limits != nil {
		// Each volume's time held at its limits: what EBS reports as exceeded IOPS and throughput.
		reg.MustRegister(limits.Collector())
	}
	h := api.New(api.Options{State: s, Faults: inj, Auth: verifier, Registry: reg,
		Admin: api.AdminRouter(s, faults.AdminHandler(inj),
			api.AdminEndpoint{Path: "/io-faults", Handler: iofaults.AdminHandler(ioFaults)}),
		AdminToken: cfg.AdminToken, ParamRead: cfg.ParamRead})
	klog.InfoS("fakecloud ready", "dataDir", cfg.DataDir, "backend", name, "region", cfg.Cloud.Region, "sigv4", verifier != nil)
	return &Server{State: s, Faults: inj, IOFaults: ioFaults, Backend: backend, Handler: h, BackendName: name, IOLimits: limits, store: st}, nil
}

// errIOFaultsNeedFuse is why I/O faults are refused on the loop and file backends: their I/O never reaches
// fakecloud.
var errIOFaultsNeedFuse = errors.New("I/O faults need --backend fuse")

// newIOFaults makes the I/O fault injector with cfg's rules; only the fuse backend takes rules.
func newIOFaults(cfg Config) (*iofaults.Injector, error) {
	var unavailable error
	if cfg.Backend != BackendFuse {
		unavailable = errIOFaultsNeedFuse
	}
	inj := iofaults.New(iofaults.Options{Unavailable: unavailable})
	if err := inj.Set(cfg.IOFaults); err != nil {
		return nil, fmt.Errorf("--fault-io: %w", err)
	}
	return inj, nil
}

// ioLimits is the policy that holds volumes to their IOPS and throughput, or nil when off.
func ioLimits(st *atomic.Pointer[state.State], on bool) *iolimits.Policy {
	if !on {
		return nil
	}
	return iolimits.New(iolimits.Options{Lookup: func(volumeID string) (iolimits.Spec, bool) {
		s := st.Load()
		if s == nil {
			return iolimits.Spec{}, false
		}
		p, err := s.VolumePerformance(volumeID)
		if err != nil {
			return iolimits.Spec{}, false
		}
		return iolimits.Spec{Type: p.Type, SizeGiB: p.SizeGiB, Iops: p.Iops, Throughput: p.Throughput}, true
	}})
}

// limitsPolicy keeps a nil *iolimits.Policy a nil Policy, which Chain skips.
func limitsPolicy(p *iolimits.Policy) fuseblock.Policy {
	if p == nil {
		return nil
	}
	return p
}

func openBackend(kind, dataDir string, policy fuseblock.Policy, opts ...blockdev.Option) (blockdev.Backend, string, error) {
	if kind == "" || kind == BackendAuto {
		kind = BackendLoop
		if err := blockdev.Available(); err != nil {
			klog.InfoS("Loop devices unavailable; using the file backend", "reason", err.Error())
			kind = BackendFile
		}
	}
	switch kind {
	case BackendLoop:
		b, err := blockdev.NewLoopBackend(dataDir, opts...)
		return b, kind, err
	case BackendFile:
		b, err := blockdev.NewFileBackend(dataDir, opts...)
		return b, kind, err
	case BackendFuse:
		b, err := blockdev.NewFuseBackend(context.Background(), dataDir, blockdev.FuseOptions{Policy: policy}, opts...)
		return b, kind, err
	}
	return nil, "", fmt.Errorf("unknown backend %q (want loop, fuse, file or auto)", kind)
}

// warnLargestFile says at start when the data directory cannot hold the largest EBS volumes: a volume (or a
// growth) past its filesystem's largest file is refused with InsufficientVolumeCapacity naming the cause.
// restoreHydration is the policy that makes first reads of restored volumes slow, or nil when latency is 0.
func restoreHydration(st *atomic.Pointer[state.State], latency time.Duration) fuseblock.Policy {
	if latency <= 0 {
		return nil
	}
	return hydration.New(func(volumeID string) (hydration.Progress, bool) {
		s := st.Load()
		if s == nil {
			return hydration.Progress{}, false
		}
		init, err := s.VolumeInitialization(volumeID)
		if err != nil {
			return hydration.Progress{}, false
		}
		return hydration.Progress{TotalBytes: init.TotalBytes, InitializedBytes: init.InitializedBytes, RateBytes: init.RateBytes}, true
	}, hydration.Options{BlockLatency: latency})
}

func warnLargestFile(dataDir string) {
	fs, err := blockdev.Probe(dataDir)
	switch {
	case err != nil:
		klog.ErrorS(err, "Probing the data directory's largest file failed", "dataDir", dataDir)
	case fs.LargestFile < blockdev.LargestEBSVolume:
		klog.InfoS("Warning: the data directory's filesystem cannot hold the largest EBS volumes; larger volumes are refused with InsufficientVolumeCapacity",
			"dataDir", dataDir, "filesystem", fs.Type, "largestFileBytes", fs.LargestFile, "largestVolumeGiB", fs.LargestFile>>30)
	}
}

// Close stops transitions and closes the store. Loop devices stay bound for the next start, as disks stay
// attached while a control plane restarts; the fuse backend's cannot outlive its server, so it releases them
// and unmounts, and the next start binds them again.
func (s *Server) Close() error {
	s.State.Close()
	err := s.store.Close()
	if berr := s.Backend.Close(); err == nil {
		err = berr
	}
	return err
}

// ShutdownTimeout bounds a graceful HTTP shutdown.
const ShutdownTimeout = 10 * time.Second

// Timeouts bound how long a client may take to send a request, so slow or stalled connections (a body
// trickling in byte by byte) cannot hold the server's connections open. Zero fields take the defaults.
type Timeouts struct {
	// ReadHeader bounds the request line and headers. Default 10s.
	ReadHeader time.Duration
	// Read bounds the whole request, body included. Default 30s: EC2 Query bodies are at most a few KiB.
	Read time.Duration
	// Idle bounds a kept-alive connection between requests. Default 2m.
	Idle time.Duration
}

// NewHTTPServer is the http.Server fakecloud serves on. No write timeout: a restore copies a whole snapshot
// before its reply, and the client's own timeout governs that wait.
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cmpOr(t.ReadHeader, 10*time.Second),
		ReadTimeout:       cmpOr(t.Read, 30*time.Second),
		IdleTimeout:       cmpOr(t.Idle, 2*time.Minute),
		MaxHeaderBytes:    64 << 10,
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
