package blockdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
)

// lockAll takes the locks of several volumes in ID order (so two callers cannot deadlock) and returns the
// IDs sorted and the function that releases them.
func (k *keyedMutex) lockAll(ids []string) func() {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	unlocks := make([]func(), 0, len(sorted))
	for _, id := range sorted {
		unlocks = append(unlocks, k.lock(id))
	}
	return func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
}

// validateCaptures checks the IDs of a multi-volume capture; one volume appears once.
func validateCaptures(snapshots map[string]string) ([]string, error) {
	seen := map[string]bool{}
	var errs []error
	vols := make([]string, 0, len(snapshots))
	for sn, vol := range snapshots {
		errs = append(errs, validateID("snapshot", sn), validateID("volume", vol))
		if seen[vol] {
			errs = append(errs, fmt.Errorf("blockdev: volume %s captured twice", vol))
		}
		seen[vol] = true
		vols = append(vols, vol)
	}
	return vols, errors.Join(errs...)
}

// CaptureSnapshots captures several volumes under all their locks, after flushing every attached one: each is
// reflinked where the filesystem can, else left to CreateSnapshot (frozen when detached). The loop and file
// backends cannot hold a guest's writes, so the reflinks of attached volumes are made one after the other,
// microseconds apart, not at one instant; only the fuse backend has a barrier across volumes.
func (f *volumeFiles) CaptureSnapshots(ctx context.Context, snapshots map[string]string) (map[string]Capture, error) {
	vols, err := validateCaptures(snapshots)
	if err != nil {
		return nil, err
	}
	defer f.locks.lockAll(vols)()
	attached := map[string]bool{}
	for _, vol := range vols {
		if attached[vol], err = f.flushAttached(ctx, vol); err != nil {
			return nil, err
		}
	}
	out := make(map[string]Capture, len(snapshots))
	for sn, vol := range snapshots {
		c, err := f.captureLocked(sn, vol, attached[vol])
		if err != nil {
			for made := range out {
				_ = f.store.removeSnapshot(made)
			}
			return nil, err
		}
		out[sn] = c
	}
	return out, nil
}

// CaptureSnapshots fixes one instant for several volumes: every attached device is flushed, then one
// copy-on-write barrier is taken across all of them (fuseblock.BeginPointInTimes), so no write to any of them
// lands between their captures. Detached volumes are captured as CaptureSnapshot does.
func (b *FuseBackend) CaptureSnapshots(ctx context.Context, snapshots map[string]string) (map[string]Capture, error) {
	vols, err := validateCaptures(snapshots)
	if err != nil {
		return nil, err
	}
	defer b.locks.lockAll(vols)()
	out := make(map[string]Capture, len(snapshots))
	dsts := map[string]*os.File{} // volume ID → temporary file
	snapOf := map[string]string{} // volume ID → snapshot ID
	fail := func(err error) (map[string]Capture, error) {
		for _, tmp := range dsts {
			discardTemp(tmp)
		}
		for sn := range out {
			_ = b.store.removeSnapshot(sn)
		}
		return nil, err
	}
	for sn, vol := range snapshots {
		attached, err := b.flushDevice(ctx, vol)
		if err != nil {
			return fail(fmt.Errorf("snapshot %s of volume %s: %w", sn, vol, err))
		}
		if !attached {
			c, err := b.captureLocked(sn, vol, false)
			if err != nil {
				return fail(err)
			}
			out[sn] = c
			continue
		}
		tmp, err := tempFor(b.store.snapshotFile(sn))
		if err != nil {
			return fail(err)
		}
		dsts[vol], snapOf[vol] = tmp, sn
	}
	if len(dsts) == 0 {
		return out, nil
	}
	begun, err := b.fs.BeginPointInTimes(dsts)
	if err != nil {
		return fail(err)
	}
	var errs []error
	for vol, p := range begun {
		sn := snapOf[vol]
		if !p.Reflinked() {
			b.begun.put(sn, &begunCopy{p: p, tmp: dsts[vol]})
			out[sn] = CaptureSession
			continue
		}
		if _, err := p.Finish(ctx); err != nil {
			errs = append(errs, err)
			discardTemp(dsts[vol])
		} else if err := commitTemp(dsts[vol], b.store.snapshotFile(sn), b.store.durable); err != nil {
			errs = append(errs, err)
		} else {
			out[sn] = CaptureComplete
		}
	}
	if err := errors.Join(errs...); err != nil {
		for sn, c := range out {
			if c == CaptureSession {
				if bc := b.begun.take(sn); bc != nil {
					bc.abort()
				}
			}
			_ = b.store.removeSnapshot(sn)
		}
		return nil, err
	}
	return out, nil
}
