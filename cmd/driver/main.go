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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/cli"
	"github.com/diskforge/diskforge/internal/version"
	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/driver"
	"github.com/diskforge/diskforge/pkg/instancetypes"
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
	maxFormat                          int
	stateDir                           string
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
	flag.StringVar(&o.node.InstanceID, "instance-id", os.Getenv("INSTANCE_ID"), "this node's instance ID (node mode)")
	flag.StringVar(&o.node.Zone, "zone", os.Getenv("ZONE"), "this node's zone (node mode)")
	flag.StringVar(&o.node.InstanceType, "instance-type", os.Getenv("INSTANCE_TYPE"), "this node's instance type, for its volume limit (node mode)")
	flag.BoolVar(&o.imds, "imds", true, "read what flags and the Node leave unknown from the instance metadata service (node mode)")
	flag.StringVar(&o.imdsEndpoint, "imds-endpoint", os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "instance metadata service URL (default: the SDK's, 169.254.169.254)")
	flag.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "Kubernetes Node to read the instance ID and zone from when the flags do not give them")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for reading the Node (default: in-cluster)")
	flag.Int64Var(&o.maxVolumes, "max-volumes-per-node", 0, "volumes this node can hold (0: its instance type's limit less the volumes it booted with)")
	flag.IntVar(&o.maxFormat, "max-concurrent-format", 2, "mkfs runs at once on this node")
	flag.StringVar(&o.stateDir, "state-dir", driver.DefaultStateDir, "where the node plugin keeps what must outlive it (unfinished mkfs runs, devices of Xen volumes); on the host")
	o.common = cli.AddFlags(flag.CommandLine, "driver")
	flag.Parse()
	return o
}

func main() {
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
		c, err := ec2cloud.New(ctx, o.cloud)
		if err != nil {
			return fmt.Errorf("cloud: %w", err)
		}
		ctrl := driver.NewControllerServer(c)
		go ctrl.LearnZones(ctx)
		services.Controller = ctrl
	}
	if o.mode != modeController {
		node, err := newNode(ctx, o)
		if err != nil {
			return err
		}
		services.Node = node
	}
	services.Identity = driver.NewIdentityServer(o.name, version.Get().Version, services.Controller != nil, nil)
	srv := driver.NewGRPCServer(services, reg)
	lis, err := driver.Listen(o.endpoint)
	if err != nil {
		return err
	}
	if o.httpEndpoint != "" {
		go serveHTTP(ctx, o.httpEndpoint, reg)
	}
	klog.InfoS("Driver serving", "endpoint", o.endpoint, "mode", o.mode, "name", o.name)
	return driver.Serve(ctx, srv, lis, 30*time.Second)
}

// newNode learns who the node is from flags, then its Kubernetes Node, then the instance metadata service, and its
// volume limit from its instance type: it never calls the cloud's API, so nodes need no cloud credentials.
func newNode(ctx context.Context, o *options) (*driver.NodeServer, error) {
	lookupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var fromNode []func(context.Context) (topology.NodeIdentity, error)
	if o.nodeName != "" {
		fromNode = append(fromNode, func(ctx context.Context) (topology.NodeIdentity, error) {
			client, err := kubeClient(o.kubeconfig)
			if err != nil {
				return topology.NodeIdentity{}, err
			}
			return topology.NodeLabels(ctx, client, o.nodeName)
		})
	}
	id, err := topology.Resolve(lookupCtx, o.node, fromNode...)
	// Instance metadata is asked only for what flags and the Node left unknown: for the type only when its
	// address is given, since outside EC2 the default address does not answer and the type has a fallback.
	if o.imds && (err != nil || (id.InstanceType == "" && o.imdsEndpoint != "")) {
		nodeErr := err
		id, err = topology.Resolve(lookupCtx, id, func(ctx context.Context) (topology.NodeIdentity, error) {
			return topology.FromIMDS(ctx, o.imdsEndpoint)
		})
		if err != nil && nodeErr != nil && len(fromNode) > 0 {
			err = fmt.Errorf("%w; from the Node: %w", err, nodeErr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node identity (set --instance-id and --zone, or --node-name, or serve instance metadata): %w", err)
	}
	limit, known := id.VolumeLimit()
	if !known {
		klog.InfoS("Instance type unknown; using the default type's volume limit", "instanceType", id.InstanceType,
			"default", instancetypes.Default, "limit", limit)
	}
	if o.maxVolumes > 0 {
		limit = o.maxVolumes
	}
	klog.InfoS("Node identity", "instanceID", id.InstanceID, "zone", id.Zone, "instanceType", id.InstanceType,
		"bootVolumes", id.BootVolumes, "maxVolumes", limit)
	return driver.NewNodeServer(driver.NodeOptions{InstanceID: id.InstanceID, Zone: id.Zone, MaxVolumesPerNode: limit,
		MaxConcurrentFormat: o.maxFormat, StateDir: o.stateDir})
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

func serveHTTP(ctx context.Context, addr string, reg *prometheus.Registry) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Metrics server failed", "address", addr)
	}
}
