package ec2cloud

import (
	"context"
	"errors"
	"sync"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// deviceNames are the names AttachDisk hands out (cloud.DeviceNames).
var deviceNames = cloud.DeviceNames()

// deviceAllocator hands out free device names per instance without asking EC2 on every attach: it learns an
// instance's devices once, lazily, from DescribeInstances (batched with the learns of other instances), then
// keeps them current from its own attaches and detaches and from the attachments every DescribeVolumes
// reports (observe). Names taken behind its back are found when EC2 answers "already in use" (the attach then
// moves to the next name); when it runs out of names it asks EC2 again. Names go round-robin so a name just
// released is not reused at once, while the node may still be letting go of the old device.
type deviceAllocator struct {
	describe func(ctx context.Context, instanceID string) (map[string]string, error)

	mu        sync.Mutex
	instances map[string]*instanceDeviceState
	// seq numbers local changes; an observation older than a name's last local change says nothing new.
	seq uint64
}

type instanceDeviceState struct {
	// seed is held while the instance's devices are being learned.
	seed   chan struct{}
	seeded bool
	// inUse maps taken device names to their holder.
	inUse  map[string]deviceUse
	cursor int
	// changed is the seq of each name's last local change.
	changed map[string]uint64
}

// deviceUse is who holds a device name: a volume ("" when unknown: the root device, a name EC2 refused), and
// whether this allocator handed it out (ours) or learned it from EC2.
type deviceUse struct {
	volumeID string
	ours     bool
}

func newDeviceAllocator(describe func(ctx context.Context, instanceID string) (map[string]string, error)) *deviceAllocator {
	return &deviceAllocator{describe: describe, instances: map[string]*instanceDeviceState{}}
}

func (a *deviceAllocator) state(instanceID string) *instanceDeviceState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.instances[instanceID]
	if !ok {
		st = &instanceDeviceState{seed: make(chan struct{}, 1), inUse: map[string]deviceUse{}, changed: map[string]uint64{}}
		a.instances[instanceID] = st
	}
	return st
}

// learn asks EC2 for the instance's devices, once unless force. Only one learn per instance runs at a time;
// the others wait for it.
func (a *deviceAllocator) learn(ctx context.Context, instanceID string, force bool) error {
	st := a.state(instanceID)
	select {
	case st.seed <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-st.seed }()
	a.mu.Lock()
	seeded := st.seeded
	a.mu.Unlock()
	if seeded && !force {
		return nil
	}
	devs, err := a.describe(ctx, instanceID)
	if errors.Is(err, cloud.ErrNotFound) {
		// Nothing to learn; AttachVolume will say the instance does not exist (and forget drops it).
		return nil
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Names EC2 no longer reports were freed behind our back, unless we handed them out: an attach may be on
	// its way.
	for dev, use := range st.inUse {
		if _, ok := devs[dev]; !ok && !use.ours {
			delete(st.inUse, dev)
		}
	}
	for dev, vol := range devs {
		// EC2's word wins over ours; a name we handed out that EC2 shows on our volume stays ours.
		if use, ok := st.inUse[dev]; !ok || use.volumeID != vol {
			st.inUse[dev] = deviceUse{volumeID: vol}
		}
	}
	st.seeded = true
	klog.V(4).InfoS("Learned instance devices", "instanceID", instanceID, "inUse", len(st.inUse))
	return nil
}

// allocate reserves a device name for volumeID on the instance. A volume that already holds a name there
// gets it again.
func (a *deviceAllocator) allocate(ctx context.Context, instanceID, volumeID string) (string, error) {
	for _, force := range []bool{false, true} {
		if err := a.learn(ctx, instanceID, force); err != nil {
			return "", err
		}
		dev, ok, err := a.pick(instanceID, volumeID)
		if ok || err != nil {
			return dev, err
		}
	}
	return "", newError("attach disk", cloud.ErrLimitExceeded, "no free device name on instance %s", instanceID)
}

// pick hands out a name from what is known of the instance. An instance forgotten since it was learned is
// one EC2 has just said does not exist (a concurrent attach to it was refused): that is this attach's answer
// too, without asking EC2 again.
func (a *deviceAllocator) pick(instanceID, volumeID string) (string, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.instances[instanceID]
	if !ok {
		return "", false, newError("attach disk", cloud.ErrNotFound, "instance %s does not exist", instanceID)
	}
	for dev, use := range st.inUse {
		if use.ours && use.volumeID == volumeID {
			return dev, true, nil
		}
	}
	for i := range deviceNames {
		dev := deviceNames[(st.cursor+i)%len(deviceNames)]
		if _, taken := st.inUse[dev]; !taken {
			a.set(st, dev, deviceUse{volumeID: volumeID, ours: true})
			st.cursor = (st.cursor + i + 1) % len(deviceNames)
			return dev, true, nil
		}
	}
	return "", false, nil
}

// takenElsewhere records that EC2 refused dev on the instance as already in use by someone else.
func (a *deviceAllocator) takenElsewhere(instanceID, dev string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.instances[instanceID]; ok {
		a.set(st, dev, deviceUse{})
	}
}

// adopt records that volumeID holds dev on the instance (an attachment found rather than made).
func (a *deviceAllocator) adopt(instanceID, volumeID, dev string) {
	st := a.state(instanceID)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop(st, volumeID)
	a.set(st, dev, deviceUse{volumeID: volumeID, ours: true})
}

// release frees whatever name volumeID holds on the instance.
func (a *deviceAllocator) release(instanceID, volumeID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.instances[instanceID]; ok {
		a.drop(st, volumeID)
	}
}

// forget drops what is known of an instance (EC2 says it does not exist): an instance that comes back under
// the same ID is learned afresh.
func (a *deviceAllocator) forget(instanceID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.instances, instanceID)
}

// set records a local change of dev; the caller holds a.mu.
func (a *deviceAllocator) set(st *instanceDeviceState, dev string, use deviceUse) {
	a.seq++
	st.inUse[dev], st.changed[dev] = use, a.seq
}

// drop frees every name volumeID holds on the instance; the caller holds a.mu.
func (a *deviceAllocator) drop(st *instanceDeviceState, volumeID string) {
	for d, use := range st.inUse {
		if use.volumeID == volumeID {
			a.seq++
			delete(st.inUse, d)
			st.changed[d] = a.seq
		}
	}
}

// mark is taken before a DescribeVolumes call; observe then ignores what the call says about names changed
// locally since.
func (a *deviceAllocator) mark() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seq
}

// volumeAttachments is what one DescribeVolumes reported of one volume: the device it holds on each
// instance it is attached (or attaching) to.
type volumeAttachments struct {
	volumeID string
	devices  map[string]string
}

// observe keeps the learned instances current from what a DescribeVolumes started at mark reported: a
// volume's device on an instance is taken, and a name held by a volume that EC2 no longer shows there is
// free, unless this allocator handed it out (an attach may be on its way) or changed it since mark.
func (a *deviceAllocator) observe(mark uint64, vols []volumeAttachments) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range vols {
		for instanceID, st := range a.instances {
			if !st.seeded {
				continue
			}
			dev, attached := v.devices[instanceID]
			for d, use := range st.inUse {
				if use.volumeID == v.volumeID && !use.ours && d != dev && st.changed[d] <= mark {
					delete(st.inUse, d)
				}
			}
			if !attached || st.changed[dev] > mark {
				continue
			}
			if use, ok := st.inUse[dev]; !ok || use.volumeID != v.volumeID {
				st.inUse[dev] = deviceUse{volumeID: v.volumeID}
			}
		}
	}
}
