package blockdev

import (
	"fmt"
	"os"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// Available reports why the loop backend cannot be used here, or nil when it can. cmd uses it to pick the loop
// backend by default and fall back to the file backend (unprivileged tests, CI without loop devices).
func Available() error {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("loop devices need root, running as uid %d", euid)
	}
	f, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop devices need %s: %w", loopControl, err)
	}
	_ = f.Close()
	if _, err := os.Stat(loopdev.DefaultRoot); err != nil {
		return fmt.Errorf("loop devices are found through %s: %w", loopdev.DefaultRoot, err)
	}
	return nil
}
