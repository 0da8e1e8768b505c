package fuseblock

import (
	"errors"
	"fmt"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// State is what Inspect found at a mount point.
type State int

const (
	// Unmounted: nothing is mounted there.
	Unmounted State = iota
	// Live: a fakecloud FUSE filesystem whose server answers (another fakecloud on the same data directory).
	Live
	// Stale: a fakecloud FUSE filesystem whose server is gone ("transport endpoint is not connected").
	Stale
)

func (s State) String() string {
	switch s {
	case Unmounted:
		return "unmounted"
	case Live:
		return "live"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// probeWait bounds the stat that tells a live mount from a stale one: a server that is alive but stopped
// (SIGSTOP, a debugger) would block it forever.
const probeWait = 5 * time.Second

// Inspect reports what is mounted on dir (the topmost mount when several are stacked). A mount of another
// filesystem is an error: fakecloud touches no mount it did not make.
func Inspect(dir string) (State, error) {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != dir, false
	})
	if err != nil {
		return Unmounted, fmt.Errorf("fuseblock: read mounts: %w", err)
	}
	if len(mounts) == 0 {
		return Unmounted, nil
	}
	top := mounts[len(mounts)-1]
	if top.FSType != fsType {
		return Unmounted, fmt.Errorf("fuseblock: %s has a %s filesystem mounted on it, not fakecloud's %s", dir, top.FSType, fsType)
	}
	done := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		done <- unix.Stat(dir, &st)
	}()
	select {
	case err = <-done:
	case <-time.After(probeWait):
		return Unmounted, fmt.Errorf("fuseblock: the FUSE filesystem on %s does not answer (its server is stopped?)", dir)
	}
	switch {
	case err == nil:
		return Live, nil
	case errors.Is(err, unix.ENOTCONN), errors.Is(err, unix.ECONNABORTED):
		return Stale, nil
	}
	return Unmounted, fmt.Errorf("fuseblock: probe %s: %w", dir, err)
}

// RemoveStale detaches the stale mount on dir. It is lazy because loop devices whose release waits for a
// holder still hold files of it; the kernel frees it when they let go.
func RemoveStale(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("fuseblock: unmount stale %s: %w", dir, err)
	}
	return nil
}
