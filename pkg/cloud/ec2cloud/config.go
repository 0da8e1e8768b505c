package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// Options configure the cloud. Only Region (or the SDK's region configuration) is required.
type Options struct {
	// Endpoint is the EC2 endpoint URL, e.g. fakecloud's. Empty uses the SDK's resolution (AWS_ENDPOINT_URL_EC2,
	// AWS_ENDPOINT_URL, shared config, then the provider's public endpoint).
	Endpoint string
	// Region overrides the SDK's region configuration (AWS_REGION, shared config).
	Region string
	// AccessKeyID and SecretAccessKey (with SessionToken, optionally) are static credentials; when empty the
	// SDK's default chain is used (environment, shared files, web identity, instance metadata...).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// HTTPClient replaces the SDK's HTTP client.
	HTTPClient *http.Client

	// ClusterID, when set, is tagged on every disk and snapshot and limits ListDisks and ListSnapshots to them.
	ClusterID string

	// ExtraTags go on every disk and snapshot the driver creates (--extra-tags); a class's tags override them,
	// and the driver's own keys override both.
	ExtraTags map[string]string

	Wait  WaitOptions
	Retry RetryOptions
	// Pace keeps calls within EC2's request buckets (pace.go); on by default.
	Pace PaceOptions

	// AttachStuckTimeout is how long an attachment may stay attaching before AttachDisk (or
	// WaitForAttachment) force-detaches it and attaches again, once per call; 0 (or less) never does. The
	// driver's flag defaults it to DefaultAttachStuckTimeout.
	AttachStuckTimeout time.Duration

	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// DefaultAttachStuckTimeout is the bound after which an attachment still attaching counts as stuck: the time
// the EBS CSI driver gives an attachment before it aborts it.
const DefaultAttachStuckTimeout = 90 * time.Second

// Cloud is the EC2 implementation of cloud.Cloud.
type Cloud struct {
	ec2       *ec2.Client
	region    string
	clusterID string
	wait      WaitOptions
	retry     *retryers
	metrics   *metrics
	extraTags map[string]string
	// pacer paces calls per action; nil when Options.Pace.Off.
	pacer   *pacer
	devices *deviceAllocator
	// estimates learn how long transitions take, for the first poll of a wait.
	estimates *durationEstimates
	// stuckAfter is Options.AttachStuckTimeout; 0 is off.
	stuckAfter time.Duration

	// unbatched makes every wait poll on its own; benchmarks set it to measure what batching saves.
	unbatched bool

	volumes       *batcher[ec2types.Volume]
	modifications *batcher[ec2types.VolumeModification]
	snapshots     *batcher[ec2types.Snapshot]
	instances     *batcher[ec2types.Instance]
	// modifiers queue and coalesce the modifications of each volume.
	modifiers *modifiers
}

var _ cloud.Cloud = (*Cloud)(nil)

// New builds the cloud: it loads the SDK configuration (region and credentials from the default chain unless
// given), and sets up the client with its retryers and metrics. It makes no API call.
func New(ctx context.Context, o Options) (*Cloud, error) {
	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	switch {
	case o.AccessKeyID != "" && o.SecretAccessKey != "":
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	case o.AccessKeyID != "" || o.SecretAccessKey != "":
		return nil, errors.New("static credentials need both an access key ID and a secret access key")
	}
	for k := range o.ExtraTags {
		if cloud.ReservedTag(k) {
			return nil, fmt.Errorf("extra tag %q is the driver's own", k)
		}
	}
	if o.HTTPClient != nil {
		loadOpts = append(loadOpts, config.WithHTTPClient(o.HTTPClient))
	} else {
		loadOpts = append(loadOpts, config.WithHTTPClient(defaultHTTPClient()))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS SDK configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no region: set it in the options or through the SDK configuration (AWS_REGION)")
	}
	return newFromConfig(cfg, o), nil
}

func newFromConfig(cfg aws.Config, o Options) *Cloud {
	o.Wait = o.Wait.withDefaults()
	o.Retry = o.Retry.withDefaults()
	m := newMetrics(o.Registerer)
	r := newRetryers(o.Retry)
	var p *pacer
	if !o.Pace.Off {
		p = newPacer(o.Pace, realClock{}, m)
	}
	client := ec2.NewFromConfig(cfg, func(eo *ec2.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.Endpoint)
		}
		// Our retryers govern; AWS_MAX_ATTEMPTS and AWS_RETRY_MODE would otherwise wrap them.
		eo.Retryer, eo.RetryMaxAttempts, eo.RetryMode = r.describe, 0, ""
		eo.APIOptions = append(eo.APIOptions, m.addMiddleware)
		if p != nil {
			eo.APIOptions = append(eo.APIOptions, p.addMiddleware)
		}
	})
	c := &Cloud{ec2: client, region: cfg.Region, clusterID: o.ClusterID, extraTags: maps.Clone(o.ExtraTags), wait: o.Wait, retry: r, metrics: m, pacer: p,
		stuckAfter: max(o.AttachStuckTimeout, 0)}
	c.devices = newDeviceAllocator(c.describeInstanceDevices)
	c.estimates = newDurationEstimates(4 * o.Wait.Initial)
	c.volumes = newBatcher("volumes", c.fetchVolumes, o.Wait, m,
		c.pollSpacing("DescribeVolumes", "CreateVolume", "AttachVolume", "DetachVolume", "DeleteVolume"))
	c.modifications = newBatcher("modifications", c.fetchModifications, o.Wait, m,
		c.pollSpacing("DescribeVolumesModifications", "ModifyVolume"))
	c.snapshots = newBatcher("snapshots", c.fetchSnapshots, o.Wait, m, c.pollSpacing("DescribeSnapshots", "CreateSnapshot"))
	c.instances = newBatcher("instances", c.fetchInstances, o.Wait, m, c.pollSpacing("DescribeInstances"))
	c.modifiers = newModifiers(c)
	klog.V(2).InfoS("EC2 cloud configured", "region", cfg.Region, "endpoint", o.Endpoint, "clusterID", o.ClusterID,
		"mutatingMaxAttempts", o.Retry.MaxAttempts, "retryMode", o.Retry.Mode, "paced", p != nil, "attachStuckTimeout", c.stuckAfter)
	return c
}

// pollSpacing is the spacing of a batcher whose waits follow calls of actions (see pacer.pollSpacing); nil
// when the cloud is not paced.
func (c *Cloud) pollSpacing(actions ...string) func() time.Duration {
	if c.pacer == nil {
		return nil
	}
	return func() time.Duration { return c.pacer.pollSpacing(actions...) }
}

// idleConnsPerHost is how many connections to the endpoint stay open between calls. The SDK keeps 10, so a
// burst of parallel calls (a batch of CreateVolumes, then their attaches) opens a new connection, TCP and TLS,
// for most calls of every burst.
const idleConnsPerHost = 128

// defaultHTTPClient is the SDK's client, keeping enough idle connections for the driver's bursts.
func defaultHTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = max(tr.MaxIdleConns, idleConnsPerHost)
		tr.MaxIdleConnsPerHost = idleConnsPerHost
	})
}

// Region is the region the cloud talks to.
func (c *Cloud) Region() string { return c.region }
