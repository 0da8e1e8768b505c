package fuseblock

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// BeginPointInTimes fixes one instant for copies of several volumes (volume ID → empty destination), as
// BeginPointInTime does for one: every volume's gate is taken (write side, in volume ID order, so two such
// calls cannot deadlock; a write holds only its own volume's gate), so no write to any of them is in flight or
// can start while the sessions are installed, and the instant is the same for all: a write to one volume that
// lands after it lands after it on every other. On error nothing is begun.
func (f *FS) BeginPointInTimes(dsts map[string]*os.File) (map[string]*PointInTime, error) {
	ids := make([]string, 0, len(dsts))
	for id := range dsts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	srcs := make(map[string]*os.File, len(ids))
	closeAll := func() {
		for _, src := range srcs {
			_ = src.Close()
		}
	}
	for _, id := range ids {
		if _, ok := f.volumeOf(id + f.cfg.Suffix); !ok {
			closeAll()
			return nil, fmt.Errorf("fuseblock: copy %q: %w", id, fs.ErrNotExist)
		}
		src, err := os.Open(f.realPath(id))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("fuseblock: copy volume %s: %w", id, err)
		}
		srcs[id] = src
		// Most dirty data is written back before the barrier, so the syncs inside it are short.
		if err := src.Sync(); err != nil {
			closeAll()
			return nil, fmt.Errorf("fuseblock: sync %s: %w", src.Name(), err)
		}
	}
	vols := make([]*cowVolume, len(ids))
	for i, id := range ids {
		vols[i] = f.volume(id)
		vols[i].gate.Lock()
	}
	out := make(map[string]*PointInTime, len(ids))
	var err error
	for i, id := range ids {
		var s *session
		var stats CopyStats
		o := sessionOptions{chunk: cowChunk, copy: copyData}
		if s, stats, err = vols[i].startLocked(srcs[id], dsts[id], o); err != nil {
			break
		}
		out[id] = &PointInTime{f: f, v: vols[i], src: srcs[id], dst: dsts[id], ownsSrc: true, s: s, stats: stats}
	}
	for _, v := range vols {
		v.gate.Unlock()
	}
	if err != nil {
		for _, p := range out {
			p.Abort()
		}
		for id, src := range srcs {
			if _, begun := out[id]; !begun {
				_ = src.Close()
			}
		}
		return nil, err
	}
	return out, nil
}
