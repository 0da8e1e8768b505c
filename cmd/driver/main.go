// Command driver runs the diskforge CSI driver: controller, node, or both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/cli"
	"github.com/diskforge/diskforge/internal/kubeclient"
	"github.com/diskforge/diskforge/internal/version"
	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/driver"
	"github.com/diskforge/diskforge/pkg/instancetypes"
	"github.com/diskforge/diskforge/pkg/loopdev"
	"github.com/diskforge/diskforge/pkg/nodelife"
	"github.com/diskforge/diskforge/pkg/tagspec"
	"github.com/diskforge/diskforge/pkg/topology"
)

const (
	modeController = "controller"
	modeNode       = "node"
	modeAll        = "all"
)

type options struct {
	endpoint, mode, name, httpEndpoint string
	cloud                              ec2cloud.Options
	node                               topology.NodeIdentity
	nodeName, kubeconfig               string
	imdsEndpoint                       string
	imds                               bool
	maxVolumes                         int64
	reservedAttachments                int
	maxFormat                          int
	stateDir                           string
	legacyXFS                          bool
	shutdownWait                       time.Duration
	identityWait                       time.Duration
	loopNodes                          int
	requestLimits                      string
	extraTags                          string
	common                             *cli.Flags
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.endpoint, "endpoint", envOr("CSI_ENDPOINT", "unix:///csi/csi.sock"), "CSI endpoint (unix:///path or tcp://host:port)")
	flag.StringVar(&o.mode, "mode", modeAll, "services to run: controller, node or all")
	flag.StringVar(&o.name, "driver-name", "disk.csi.diskforge.io", "CSI driver name")
	flag.StringVar(&o.httpEndpoint, "http-endpoint", "", "address for /metrics and /healthz (empty: off)")
	flag.StringVar(&o.cloud.Endpoint, "cloud-endpoint", os.Getenv("AWS_ENDPOINT_URL_EC2"), "EC2 endpoint URL (fakecloud's, or empty for the SDK's resolution)")
	flag.StringVar(&o.cloud.Region, "region", os.Getenv("AWS_REGION"), "cloud region (default: the SDK's configuration)")
	flag.StringVar(&o.cloud.ClusterID, "cluster-id", "", "cluster ID tagged on every disk and snapshot")
	flag.DurationVar(&o.cloud.AttachStuckTimeout, "attach-stuck-timeout", ec2cloud.DefaultAttachStuckTimeout, "force-detach and attach again (once per publish) an attachment still attaching after this long; 0: never")
	flag.StringVar(&o.requestLimits, "ec2-request-limits", "", "EC2 request buckets the controller paces its calls to, at most (it slows down by itself when EC2 refuses calls within them): empty for EC2's defaults, \"off\", or Action=PerSecond/Burst,... for an account's raised limits (keys: an action, \"Describe*\", \"*\" for other actions)")
	flag.StringVar(&o.extraTags, "extra-tags", "", "tags on every disk and snapshot the controller creates, as key=value,... (a class's tagSpecification_N overrides them)")
	flag.StringVar(&o.node.InstanceID, "instance-id", os.Getenv("INSTANCE_ID"), "this node's instance ID (node mode)")
	flag.StringVar(&o.node.Zone, "zone", os.Getenv("ZONE"), "this node's zone (node mode)")
	flag.StringVar(&o.node.InstanceType, "instance-type", os.Getenv("INSTANCE_TYPE"), "this node's instance type, for its volume limit (node mode)")
	flag.BoolVar(&o.imds, "imds", true, "read what flags and the Node leave unknown from the instance metadata service (node mode)")
	flag.StringVar(&o.imdsEndpoint, "imds-endpoint", os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "instance metadata service URL (default: the SDK's, 169.254.169.254)")
	flag.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "Kubernetes Node to read the instance ID and zone from when the flags do not give them")
	flag.DurationVar(&o.identityWait, "node-identity-wait", 0, "wait up to this long for the Node to carry its instance ID (label node.diskforge.io/instance-id, or an aws:// provider ID) and zone, as fakecloud's --kube-nodes labels it (0: read the Node once)")
	flag.IntVar(&o.loopNodes, "loop-device-nodes", 0, "keep /dev/loopN nodes in /dev for every loop device of the kernel and this many more, and /dev/loop-control, checked at start and every minute: a container's /dev (a kind node's) lacks the nodes of loop devices made after it started, which kubelet's losetup needs for block volumes (0: off)")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for reading the Node (default: in-cluster)")
	flag.Int64Var(&o.maxVolumes, "max-volumes-per-node", 0, "volumes this node can hold (0: its instance type's limit less the volumes attached to it outside the driver, counted again at each NodeGetInfo)")
	flag.IntVar(&o.reservedAttachments, "reserved-volume-attachments", -1, "attachment slots reserved for volumes that are not the driver's, the root volume's included; replaces counting them from instance metadata (-1: count them). Not used with --max-volumes-per-node")
	flag.IntVar(&o.maxFormat, "max-concurrent-format", 2, "mkfs runs at once on this node")
	flag.BoolVar(&o.legacyXFS, "legacy-xfs", false, "format xfs volumes without reflink, bigtime, inobtcount and nrext64 (those the installed mkfs.xfs knows), so that nodes with kernels up to 5.4 can mount them (node mode)")
	flag.StringVar(&o.stateDir, "state-dir", driver.DefaultStateDir, "where the node plugin keeps what must outlive it (unfinished mkfs runs, devices of Xen volumes); on the host")
	flag.DurationVar(&o.shutdownWait, "shutdown-wait", 25*time.Second, "on SIGTERM while its Node is drained or shut down, how long the node plugin keeps serving until the Node holds none of the driver's VolumeAttachments; below the pod's terminationGracePeriodSeconds (0: exit at once)")
	o.common = cli.AddFlags(flag.CommandLine, "driver")
	flag.Parse()
	return o
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == selftestCommand {
		if err := runSelftest(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "selftest:", err)
			os.Exit(1)
		}
		return
	}
	o := parseFlags()
	done, err := o.common.Apply(os.Stdout)
	if err == nil && !done {
		err = run(o)
	}
	if err != nil {
		klog.ErrorS(err, "Driver failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(o *options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.mode != modeController && o.mode != modeNode && o.mode != modeAll {
		return fmt.Errorf("--mode must be controller, node or all, not %q", o.mode)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.cloud.Registerer = reg

	services := driver.Services{}
	if o.mode != modeNode {
		pace, err := ec2cloud.ParseRequestLimits(o.requestLimits)
		if err != nil {
			return fmt.Errorf("--ec2-request-limits: %w", err)
		}
		o.cloud.Pace = pace
		if o.cloud.ExtraTags, err = tagspec.ParseList(o.extraTags); err != nil {
			return fmt.Errorf("--extra-tags: %w", err)
		}
		c, err := ec2cloud.New(ctx, o.cloud)
		if err != nil {
			return fmt.Errorf("cloud: %w", err)
		}
		ctrl := driver.NewControllerServer(c)
		go ctrl.LearnZones(ctx)
		services.Controller = ctrl
		services.GroupController = driver.NewGroupControllerServer(ctrl)
	}
	var life *nodeLife
	if o.mode != modeController {
		if o.loopNodes > 0 {
			if err := ensureLoopNodes(o.loopNodes); err != nil {
				return err
			}
			go keepLoopNodes(ctx, o.loopNodes)
		}
		node, l, err := newNode(ctx, o)
		if err != nil {
			return err
		}
		// Each staged volume's I/O statistics, read at scrape time, on --http-endpoint with the rest.
		reg.MustRegister(node.Collector())
		services.Node, life = node, l
	}
	services.Identity = driver.NewIdentityServer(o.name, version.Get().Version, services.Controller != nil, nil)
	srv := driver.NewGRPCServer(services, reg)
	lis, err := driver.Listen(o.endpoint)
	if err != nil {
		return err
	}
	// Serving outlives the signal by the node plugin's shutdown wait: kubelet may still have volumes to unstage.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		<-ctx.Done()
		life.waitShutdown()
		stopServing()
	}()
	if o.httpEndpoint != "" {
		go serveHTTP(serveCtx, o.httpEndpoint, reg, life.prestopHandler())
	}
	klog.InfoS("Driver serving", "endpoint", o.endpoint, "mode", o.mode, "name", o.name)
	life.start(ctx, serveCtx)
	return driver.Serve(serveCtx, srv, lis, 30*time.Second)
}

// nodeLife is the node plugin's part in its Node's life (pkg/nodelife); nil without a Kubernetes client.
type nodeLife struct {
	attachments *nodelife.Attachments
	taint       *nodelife.StartupTaint
	shutdown    *nodelife.Shutdown
}

// start watches the driver's VolumeAttachments until serving ends (the shutdown wait reads them), and removes
// the startup taint once kubelet has registered the plugin, then whenever it comes back, until the signal to
// stop (running ends): a taint put back while the plugin shuts down stays. The listener is open by then, so
// kubelet's calls are answered.
func (l *nodeLife) start(running, serving context.Context) {
	if l == nil {
		return
	}
	go l.attachments.Run(serving)
	go func() { _ = l.taint.Serve(running) }()
}

func (l *nodeLife) waitShutdown() {
	if l != nil {
		l.shutdown.WaitAtExit(context.Background())
	}
}

// prestopHandler serves the shutdown wait to the preStop hooks of the driver and the registrar.
func (l *nodeLife) prestopHandler() http.Handler {
	if l == nil {
		return nil
	}
	return l.shutdown.Handler()
}

// newNode learns who the node is from flags, then its Kubernetes Node, then the instance metadata service, and its
// volume limit from its instance type and the volumes attached to it: it never calls the cloud's API, so nodes
// need no cloud credentials. With its Node known it also takes part in the Node's life (nodeLife).
func newNode(ctx context.Context, o *options) (*driver.NodeServer, *nodeLife, error) {
	lookupCtx, cancel := context.WithTimeout(ctx, max(30*time.Second, o.identityWait))
	defer cancel()
	var fromNode []func(context.Context) (topology.NodeIdentity, error)
	var client kubernetes.Interface
	if o.nodeName != "" {
		var clientErr error
		if client, clientErr = kubeclient.New(o.kubeconfig); clientErr != nil {
			client = nil // not a typed nil: no Node life without a client
		}
		fromNode = append(fromNode, func(ctx context.Context) (topology.NodeIdentity, error) {
			if clientErr != nil {
				return topology.NodeIdentity{}, clientErr
			}
			if o.identityWait > 0 {
				return topology.WaitNodeLabels(ctx, client, o.nodeName, 2*time.Second)
			}
			return topology.NodeLabels(ctx, client, o.nodeName)
		})
	}
	var md *topology.Metadata
	if o.imds {
		md = topology.NewMetadata(o.imdsEndpoint)
	}
	id, err := topology.Resolve(lookupCtx, o.node, fromNode...)
	// Instance metadata is asked only for what flags and the Node left unknown: for the type only when its
	// address is given, since outside EC2 the default address does not answer and the type has a fallback.
	if o.imds && (err != nil || (id.InstanceType == "" && o.imdsEndpoint != "")) {
		nodeErr := err
		id, err = topology.Resolve(lookupCtx, id, md.Identity)
		if err != nil && nodeErr != nil && len(fromNode) > 0 {
			err = fmt.Errorf("%w; from the Node: %w", err, nodeErr)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("node identity (set --instance-id and --zone, or --node-name, or serve instance metadata): %w", err)
	}
	limit, known := id.VolumeLimit()
	info, how := instancetypes.Resolve(id.InstanceType)
	if !known {
		klog.InfoS("Instance type not in the table; counted by its family's most restrictive size, else the default type",
			"instanceType", id.InstanceType, "rule", how, "default", instancetypes.Default, "limit", info.VolumeLimit())
	}
	reserved := 0 // count them from instance metadata
	if o.reservedAttachments >= 0 {
		// The root volume's slot is already out of the type's limit: 0 and 1 reserve the same.
		reserved = max(o.reservedAttachments, 1)
		limit = topology.LimitLess(int64(info.VolumeLimit()), reserved-1)
	}
	if o.maxVolumes > 0 {
		limit = o.maxVolumes
	}
	klog.InfoS("Node identity", "instanceID", id.InstanceID, "zone", id.Zone, "instanceType", id.InstanceType,
		"bootVolumes", id.BootVolumes, "maxVolumes", limit)
	nodeOpts := driver.NodeOptions{InstanceID: id.InstanceID, Zone: id.Zone, MaxVolumesPerNode: limit,
		MaxConcurrentFormat: o.maxFormat, StateDir: o.stateDir, LegacyXFS: o.legacyXFS}
	var life *nodeLife
	if client != nil {
		attachments := nodelife.NewAttachments(client, o.name, o.nodeName)
		life = &nodeLife{attachments: attachments,
			taint: &nodelife.StartupTaint{Client: client, NodeName: o.nodeName, DriverName: o.name},
			shutdown: nodelife.NewShutdown(nodelife.ShutdownOptions{Client: client, NodeName: o.nodeName,
				Attachments: attachments, Bound: o.shutdownWait})}
		if o.maxVolumes == 0 && md != nil {
			typeLimit, _ := topology.TypeVolumeLimit(id.InstanceType)
			nodeOpts.VolumeLimit = nodelife.NewLimits(nodelife.LimitOptions{TypeLimit: typeLimit, Initial: limit,
				Attached: md.AttachedVolumes, Attachments: attachments, DeviceKey: driver.PublishDevicePath,
				Interfaces: md.NetworkInterfaces, Reserved: reserved,
				TypeLimitWith: func(n int) int64 { return int64(info.VolumeLimitWith(n)) }})
		}
	} else {
		klog.InfoS("No Kubernetes Node (--node-name): no startup taint removal, no shutdown wait, a fixed volume limit")
	}
	node, err := driver.NewNodeServer(nodeOpts)
	return node, life, err
}

// ensureLoopNodes makes the loop device nodes of --loop-device-nodes in /dev (the host's, mounted there), unless
// that /dev is the kernel's devtmpfs (a VM's or a machine's), which gets a node for each device as it is added:
// nodes made there for devices that do not exist yet would stay behind.
func ensureLoopNodes(spare int) error {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/dev"))
	if err != nil {
		return fmt.Errorf("--loop-device-nodes: %w", err)
	}
	if kernelManaged(mounts) {
		klog.V(4).InfoS("The kernel's devtmpfs is /dev: no loop device nodes to make")
		return nil
	}
	made, err := loopdev.Sysfs{}.EnsureFreeNodes("/dev", spare)
	if err != nil {
		return fmt.Errorf("--loop-device-nodes: %w", err)
	}
	if made > 0 {
		klog.InfoS("Made loop device nodes", "dir", "/dev", "made", made, "spare", spare)
	}
	return nil
}

// kernelManaged says whether the last of the mounts at a directory (the one in effect) is devtmpfs.
func kernelManaged(mounts []*mountinfo.Info) bool {
	return len(mounts) > 0 && mounts[len(mounts)-1].FSType == "devtmpfs"
}

// keepLoopNodes tops the loop device nodes up every minute: the kernel adds devices as they are used.
func keepLoopNodes(ctx context.Context, spare int) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := ensureLoopNodes(spare); err != nil {
				klog.ErrorS(err, "Making loop device nodes failed")
			}
		}
	}
}

// serveHTTP serves /metrics, /healthz and, when prestop is set, /prestop (the node-driver-registrar's preStop hook).
func serveHTTP(ctx context.Context, addr string, reg *prometheus.Registry, prestop http.Handler) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if prestop != nil {
		mux.Handle("/prestop", prestop)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Metrics server failed", "address", addr)
	}
}
