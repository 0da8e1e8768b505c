package nodelife

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/topology"
)

// Defaults of LimitOptions.
const (
	DefaultMetadataTimeout = 2 * time.Second
	DefaultMetadataRetry   = 30 * time.Second
)

// LimitOptions configure Limits.
type LimitOptions struct {
	// TypeLimit is the instance type's data volume limit with its default network interface
	// (topology.TypeVolumeLimit).
	TypeLimit int64
	// Interfaces reads how many network interfaces the instance has now (topology.Metadata.NetworkInterfaces),
	// and TypeLimitWith is the type's data volume limit with that many (instancetypes.Info.VolumeLimitWith): on a
	// shared limit each interface past the primary one takes a slot. Either nil leaves the limit at TypeLimit.
	Interfaces    func(context.Context) (int, error)
	TypeLimitWith func(interfaces int) int64
	// Reserved, when 1 or more, is how many slots volumes other than the driver's take, the root volume's
	// included (--reserved-volume-attachments): it replaces counting them from instance metadata, and Attached
	// is not read. 0 counts them.
	Reserved int
	// Initial is the answer until the first count: the type's limit less the volumes of the instance's start.
	Initial int64
	// Attached reads the device names of the EBS volumes the instance metadata lists besides its root volume
	// (topology.Metadata.AttachedVolumes): those of the instance's last start; nil leaves the limit at Initial.
	Attached func(context.Context) ([]string, error)
	// Attachments are the driver's VolumeAttachments on the node.
	Attachments *Attachments
	// DeviceKey is the key of an attachment's metadata (the driver's publish context) that names the device the
	// volume was attached under.
	DeviceKey string
	// MetadataTimeout bounds one read of Attached; MetadataRetry is how long a failed read keeps the next one
	// off NodeGetInfo's path. Zero values mean the defaults.
	MetadataTimeout, MetadataRetry time.Duration
}

// Limits is the node's attach limit as NodeGetInfo reports it on each call (kubelet calls it every
// nodeAllocatableUpdatePeriodSeconds of the CSIDriver, and at once after an attach failed with
// ResourceExhausted): the instance type's limit less the volumes attached to the instance that are not the
// driver's, so that a volume attached outside Kubernetes takes its slot from the scheduler's count.
//
// The instance's volumes come from instance metadata, which on EC2 lists the volumes attached when the instance
// last started and is not updated until the next start. The driver's are those of its VolumeAttachments on the
// node that are attached, and every entry under one of the controller's device names (topology.ForeignVolumes):
// a volume the driver attached before a stop and start, then detached, stays listed until the next start and
// must not take a slot. A volume attached outside the driver counts from the instance's next start. When either cannot be read the last good answer stands: NodeGetInfo never fails for it. Instance
// metadata is read on NodeGetInfo's path only while it answers; after a failure (outside EC2 nothing answers at
// the default address) it is read in the background, so a call never waits for it to time out.
type Limits struct {
	opts LimitOptions

	// fetching is held by the one read of instance metadata in progress.
	fetching sync.Mutex

	mu         sync.Mutex
	last       int64
	devices    []string
	interfaces int  // 0 until read
	devicesOK  bool // the last read of instance metadata succeeded
	retryAfter time.Time
}

// NewLimits starts with o.Initial and reads instance metadata once in the background.
func NewLimits(o LimitOptions) *Limits {
	if o.MetadataTimeout <= 0 {
		o.MetadataTimeout = DefaultMetadataTimeout
	}
	if o.MetadataRetry <= 0 {
		o.MetadataRetry = DefaultMetadataRetry
	}
	l := &Limits{opts: o, last: o.Initial}
	l.refreshInBackground()
	return l
}

// MaxVolumes is the attach limit now.
func (l *Limits) MaxVolumes(ctx context.Context) int64 {
	l.mu.Lock()
	answering := l.devicesOK
	l.mu.Unlock()
	if answering {
		l.fetching.Lock()
		l.fetch(ctx)
		l.fetching.Unlock()
	} else {
		l.refreshInBackground()
	}

	vas, synced := l.opts.Attachments.List()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !synced || !l.devicesOK {
		return l.last
	}
	var ours []string
	for _, va := range vas {
		if va.Status.Attached {
			ours = append(ours, va.Status.AttachmentMetadata[l.opts.DeviceKey])
		}
	}
	// The root volume's slot is already out of the type's limit.
	foreign := max(l.opts.Reserved-1, 0)
	if l.opts.Reserved <= 0 {
		foreign = topology.ForeignVolumes(l.devices, ours)
	}
	typeLimit := l.opts.TypeLimit
	if l.interfaces > 0 && l.opts.TypeLimitWith != nil {
		typeLimit = l.opts.TypeLimitWith(l.interfaces)
	}
	limit := topology.LimitLess(typeLimit, foreign)
	if limit != l.last {
		klog.InfoS("Attach limit changed", "from", l.last, "to", limit, "typeLimit", typeLimit,
			"networkInterfaces", l.interfaces, "instanceVolumes", len(l.devices), "driverVolumes", len(ours),
			"foreignVolumes", foreign, "reserved", l.opts.Reserved)
		l.last = limit
	}
	return limit
}

// refreshInBackground reads instance metadata in a goroutine, unless a read is in progress or the last one
// failed too recently.
func (l *Limits) refreshInBackground() {
	if !l.reads() {
		return
	}
	l.mu.Lock()
	due := !time.Now().Before(l.retryAfter)
	l.mu.Unlock()
	if !due || !l.fetching.TryLock() {
		return
	}
	go func() {
		defer l.fetching.Unlock()
		l.fetch(context.Background())
	}()
}

// reads says whether there is instance metadata to read: the volumes (unless Reserved replaces them) or the
// network interfaces.
func (l *Limits) reads() bool {
	return (l.opts.Attached != nil && l.opts.Reserved <= 0) || (l.opts.Interfaces != nil && l.opts.TypeLimitWith != nil)
}

// read reads what reads says, at most MetadataTimeout.
func (l *Limits) read(ctx context.Context) (devices []string, interfaces int, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.MetadataTimeout)
	defer cancel()
	if l.opts.Attached != nil && l.opts.Reserved <= 0 {
		if devices, err = l.opts.Attached(ctx); err != nil {
			return nil, 0, err
		}
	}
	if l.opts.Interfaces != nil && l.opts.TypeLimitWith != nil {
		if interfaces, err = l.opts.Interfaces(ctx); err != nil {
			return nil, 0, fmt.Errorf("network interfaces: %w", err)
		}
	}
	return devices, interfaces, nil
}

// fetch reads instance metadata once; the caller holds fetching.
func (l *Limits) fetch(ctx context.Context) {
	if !l.reads() {
		return
	}
	devices, interfaces, err := l.read(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.devicesOK || l.retryAfter.IsZero() {
			klog.InfoS("Instance metadata does not answer: the attach limit stays as it is until it does", "limit", l.last, "err", err)
		} else {
			klog.V(4).InfoS("Instance metadata still does not answer", "err", err)
		}
		l.devicesOK = false
		l.retryAfter = time.Now().Add(l.opts.MetadataRetry)
		return
	}
	if !l.devicesOK && !l.retryAfter.IsZero() {
		klog.InfoS("Instance metadata answers again", "instanceVolumes", len(devices))
	}
	l.devices, l.interfaces, l.devicesOK = devices, interfaces, true
}
