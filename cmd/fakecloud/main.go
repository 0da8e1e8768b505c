// Command fakecloud serves an EC2-compatible API whose EBS volumes are real block devices.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/cli"
	"github.com/diskforge/diskforge/internal/kubeclient"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/hydration"
	"github.com/diskforge/diskforge/pkg/fakecloud/imds"
	"github.com/diskforge/diskforge/pkg/fakecloud/iofaults"
	"github.com/diskforge/diskforge/pkg/fakecloud/kubenodes"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "fakecloud failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

type options struct {
	listen    string
	zones     string
	instances string
	keys      string
	keysFile  string
	tokenFile string
	imds      map[string]string
	// versionOnly: --version was given and printed.
	versionOnly bool
	faultSpec   faults.Spec
	ioFaults    iofaults.Flag
	timeouts    fakecloud.Timeouts
	cfg         fakecloud.Config
	kubeNodes   kubeNodesFlags
}

// kubeNodesFlags turn on the registration of the cluster's Nodes as instances (package kubenodes).
type kubeNodesFlags struct {
	enabled    bool
	kubeconfig string
	zones      string
	opts       kubenodes.Options
}

func parseFlags() (*options, error) {
	o := &options{cfg: fakecloud.Config{Cloud: fakecloud.DefaultCloud()}}
	d := &o.cfg.Cloud.Durations
	flag.StringVar(&o.listen, "listen", "127.0.0.1:8787", "address to serve the EC2 API on")
	flag.StringVar(&o.cfg.DataDir, "data-dir", "/var/lib/fakecloud", "directory for volume files, snapshots and state")
	flag.StringVar(&o.cfg.Backend, "backend", fakecloud.BackendAuto, "block backend: loop, fuse (loop devices on fakecloud's own FUSE mount, so it sees every block I/O; needs /dev/fuse), file, or auto (loop where root and /dev/loop-control exist)")
	flag.BoolVar(&o.cfg.IOLimits, "io-limits", true, "with --backend=fuse, hold each volume to the IOPS and throughput of its type and provisioning, as ModifyVolume changes them; false measures the raw backend")
	flag.StringVar(&o.cfg.Cloud.Region, "region", o.cfg.Cloud.Region, "region name")
	flag.StringVar(&o.zones, "zones", "us-east-1a=use1-az1,us-east-1b=use1-az2,us-east-1c=use1-az4", "zones as NAME=ID,…")
	flag.StringVar(&o.instances, "instances", "", "instances as ID=ZONE[:ATTACHMENT_LIMIT[:TYPE]],… (ID=ZONE::TYPE takes the type's limit); more can be registered at /admin/instances")
	flag.StringVar(&o.keys, "access-keys", "", "turn on SigV4 checking with keys ACCESS_KEY_ID:SECRET,… (also guards /admin)")
	flag.StringVar(&o.keysFile, "access-keys-file", "", "file holding more keys as for --access-keys (comma or newline separated)")
	flag.StringVar(&o.cfg.AdminToken, "admin-token", "", "bearer token admitting /admin requests (prefer --admin-token-file)")
	flag.StringVar(&o.tokenFile, "admin-token-file", "", "file holding the admin bearer token")
	flag.BoolVar(&o.cfg.NoSync, "no-fsync", false, "skip fsync of state changes and of new volume and snapshot files (faster; a crash loses the last changes)")
	flag.DurationVar(&d.VolumeCreate, "create-duration", d.VolumeCreate, "time a volume spends creating")
	flag.DurationVar(&d.VolumeDelete, "delete-duration", d.VolumeDelete, "time a volume spends deleting")
	flag.DurationVar(&d.Attach, "attach-duration", d.Attach, "time an attachment spends attaching")
	flag.DurationVar(&d.Detach, "detach-duration", d.Detach, "time an attachment spends detaching")
	flag.DurationVar(&d.Modifying, "modifying-duration", d.Modifying, "time a modification spends modifying")
	flag.DurationVar(&d.Optimizing, "optimizing-duration", d.Optimizing, "time a modification spends optimizing")
	flag.DurationVar(&d.Snapshot, "snapshot-duration", d.Snapshot, "time a snapshot spends pending")
	flag.DurationVar(&d.InstanceStart, "instance-start-duration", d.InstanceStart, "time a started instance spends pending")
	flag.DurationVar(&d.InstanceStop, "instance-stop-duration", d.InstanceStop, "time a stopped instance spends stopping (StopInstances Force skips it)")
	flag.DurationVar(&d.InstanceTerminate, "instance-terminate-duration", d.InstanceTerminate,
		"time a terminated instance spends shutting-down (at least until its volumes are detached)")
	flag.DurationVar(&d.FSREnabling, "fsr-enabling-duration", d.FSREnabling, "time a fast snapshot restore spends enabling")
	flag.DurationVar(&d.FSROptimizing, "fsr-optimizing-duration", d.FSROptimizing, "time a fast snapshot restore spends optimizing before it is enabled")
	flag.DurationVar(&d.FSRDisabling, "fsr-disabling-duration", d.FSRDisabling, "time a fast snapshot restore spends disabling")
	initRate := flag.Uint("restore-init-rate", uint(o.cfg.Cloud.RestoreInitRate),
		"MiB/s at which a volume restored from a snapshot (without fast snapshot restore or VolumeInitializationRate) or copied initializes in the background; 0 initializes it at once")
	flag.DurationVar(&o.cfg.RestoreReadLatency, "restore-read-latency", hydration.DefaultBlockLatency,
		"with --backend fuse, what a first read of each 512 KiB block of a restored or copied volume waits until the background initialization has passed it; 0 reads them at full speed")
	flag.DurationVar(&o.cfg.Cloud.TerminatedRetention, "terminated-instance-retention", o.cfg.Cloud.TerminatedRetention,
		"how long a terminated instance stays visible (EC2: about an hour); 0 forgets it once terminated")
	flag.IntVar(&o.cfg.Cloud.ModificationLimit, "modification-limit", 0, "modifications allowed per volume per window (EBS: 4); 0 for no limit")
	flag.DurationVar(&o.cfg.Cloud.ModificationWindow, "modification-window", 0, "rolling window of the modification limit (EBS: 24h)")
	flag.DurationVar(&o.cfg.Cloud.ClientTokenRetention, "client-token-retention", o.cfg.Cloud.ClientTokenRetention,
		"how long a deleted volume's ClientToken still answers that volume (in state deleted) rather than make a new one; 0 forgets it with the volume")
	flag.IntVar(&o.cfg.Cloud.VcpuLimit, "vcpu-limit", 0, "the account's vCPU quota RunInstances launches within (instances not stopped or terminated, registered ones included); 0 for 256")
	flag.IntVar(&o.cfg.Cloud.DefaultAttachmentLimit, "attachment-limit", 0, "volumes an instance can hold when it names no limit; 0 for its instance type's limit (m5.large: 26)")
	flag.DurationVar(&o.timeouts.ReadHeader, "read-header-timeout", 10*time.Second, "time a client has to send a request's headers")
	flag.DurationVar(&o.timeouts.Read, "read-timeout", 30*time.Second, "time a client has to send a whole request, body included")
	flag.BoolVar(&o.kubeNodes.enabled, "kube-nodes", false, "make every Kubernetes Node an instance (registered when it appears, terminated when it goes) and label it with its instance ID, zone and type; needs get, list, watch and patch on nodes")
	flag.StringVar(&o.kubeNodes.kubeconfig, "kubeconfig", "", "with --kube-nodes, the kubeconfig of the cluster (default: in-cluster)")
	flag.StringVar(&o.kubeNodes.zones, "kube-node-zones", strings.Join(kubenodes.DefaultZones(), ","), "with --kube-nodes, the zones Nodes without a zone label are spread over (each to the zone with fewest)")
	flag.StringVar(&o.kubeNodes.opts.InstanceType, "kube-node-instance-type", kubenodes.DefaultInstanceType, "with --kube-nodes, the instance type of Nodes without a node.kubernetes.io/instance-type label")
	imdsSpec := flag.String("imds", "", "serve the instance metadata service (IMDSv2) of instances as ID=ADDRESS,…, one listener each")
	o.faultSpec.RegisterFlags(flag.CommandLine)
	flag.Var(&o.ioFaults, "fault-io", "I/O faults of the fuse backend, repeatable or ';'-separated: "+iofaults.Grammar+
		"; e.g. vol-1:read:eio, *:write:latency=20ms, vol-1@1Mi+4Ki:read:eio:count=3, vol-1:readonly, vol-1:hang:p=0.1 (also at /admin/io-faults)")
	common := cli.AddFlags(flag.CommandLine, "fakecloud")
	flag.Parse()
	var err error
	if o.versionOnly, err = common.Apply(os.Stdout); o.versionOnly || err != nil {
		return o, err
	}
	if *initRate > math.MaxInt32 {
		return nil, fmt.Errorf("--restore-init-rate %d is too large", *initRate)
	}
	o.cfg.Cloud.RestoreInitRate = int32(*initRate)
	if o.cfg.Cloud.Zones, err = parseZones(o.zones); err != nil {
		return nil, err
	}
	if o.cfg.Cloud.Instances, err = parseInstances(o.instances); err != nil {
		return nil, err
	}
	keys := o.keys
	if o.keysFile != "" {
		raw, err := os.ReadFile(o.keysFile)
		if err != nil {
			return nil, fmt.Errorf("--access-keys-file: %w", err)
		}
		keys += "," + strings.Join(strings.Fields(string(raw)), ",")
	}
	if o.cfg.AccessKeys, err = parsePairs(keys, ":"); err != nil {
		return nil, fmt.Errorf("--access-keys: %w", err)
	}
	if o.tokenFile != "" {
		raw, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		o.cfg.AdminToken = strings.TrimSpace(string(raw))
		if o.cfg.AdminToken == "" {
			return nil, fmt.Errorf("--admin-token-file %s is empty", o.tokenFile)
		}
	}
	if o.imds, err = parsePairs(*imdsSpec, "="); err != nil {
		return nil, fmt.Errorf("--imds: %w", err)
	}
	if o.cfg.Faults, err = o.faultSpec.Config(); err != nil {
		return nil, err
	}
	o.cfg.IOFaults = o.ioFaults.Rules
	for _, z := range strings.Split(o.kubeNodes.zones, ",") {
		if z = strings.TrimSpace(z); z != "" {
			o.kubeNodes.opts.Zones = append(o.kubeNodes.opts.Zones, z)
		}
	}
	return o, nil
}

func run() error {
	o, err := parseFlags()
	if err == nil && o.versionOnly {
		return nil
	}
	if err != nil {
		return err
	}
	srv, err := fakecloud.New(o.cfg)
	if err != nil {
		return err
	}
	if f := o.cfg.Faults; f.RateLimitProfile != "" || len(f.ActionRateLimits) > 0 || f.RateLimit.Burst > 0 {
		klog.InfoS("Rate limits", "profile", f.RateLimitProfile, "actions", f.ActionRateLimits, "shared", f.RateLimit)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			klog.ErrorS(err, "Closing fakecloud")
		}
	}()
	// The EC2 API and, for each instance named by --imds, its metadata service on a listener of its own.
	type endpoint struct {
		what, addr string
		handler    http.Handler
	}
	endpoints := []endpoint{{"EC2 API", o.listen, srv.Handler}}
	for id, addr := range o.imds {
		endpoints = append(endpoints, endpoint{"instance metadata of " + id, addr, imds.New(srv.State, id).Router()})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, len(endpoints))
	if o.kubeNodes.enabled {
		nodes, err := newKubeNodes(o.kubeNodes, srv.State)
		if err != nil {
			return err
		}
		// The controller stops before the state closes (defers run last first).
		done := make(chan struct{})
		defer func() { stop(); <-done }()
		go func() {
			defer close(done)
			nodes.Run(ctx)
		}()
	}
	var servers []*http.Server
	for _, ep := range endpoints {
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			shutdown(servers)
			return fmt.Errorf("%s: %w", ep.what, err)
		}
		hs := fakecloud.NewHTTPServer(ep.handler, o.timeouts)
		servers = append(servers, hs)
		go func() { errc <- hs.Serve(ln) }()
		klog.InfoS("Serving", "what", ep.what, "address", ln.Addr().String(), "backend", srv.BackendName)
	}
	select {
	case err := <-errc:
		shutdown(servers)
		return err
	case <-ctx.Done():
	}
	klog.InfoS("Shutting down")
	return shutdown(servers)
}

func newKubeNodes(f kubeNodesFlags, s *state.State) (*kubenodes.Controller, error) {
	client, err := kubeclient.New(f.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kube-nodes: %w", err)
	}
	return kubenodes.New(client, s, f.opts)
}

// shutdown stops every server gracefully within fakecloud.ShutdownTimeout.
func shutdown(servers []*http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), fakecloud.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func parsePairs(spec, sep string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, sep)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not KEY%sVALUE", item, sep)
		}
		out[k] = v
	}
	return out, nil
}

func parseZones(spec string) ([]state.Zone, error) {
	pairs, err := parsePairs(spec, "=")
	if err != nil {
		return nil, fmt.Errorf("--zones: %w", err)
	}
	var zones []state.Zone
	for _, item := range strings.Split(spec, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(item), "=")
		if name != "" {
			zones = append(zones, state.Zone{Name: name, ID: pairs[name]})
		}
	}
	return zones, nil
}

func parseInstances(spec string) ([]state.InstanceSpec, error) {
	var out []state.InstanceSpec
	for _, item := range strings.Split(spec, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		id, rest, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("--instances: %q is not ID=ZONE[:LIMIT[:TYPE]]", item)
		}
		parts := strings.Split(rest, ":")
		in := state.InstanceSpec{ID: id, Zone: parts[0]}
		if len(parts) > 1 && parts[1] != "" { // ID=ZONE::TYPE: the type's own limit
			n, err := strconv.Atoi(parts[1])
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("--instances: bad attachment limit in %q", item)
			}
			in.AttachmentLimit = n
		}
		if len(parts) > 2 {
			in.InstanceType = parts[2]
		}
		out = append(out, in)
	}
	return out, nil
}
