//go:build e2e

package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestClusterUpDown starts the local cluster and stops it: the harness's own check, quicker to debug than the
// scenarios.
func TestClusterUpDown(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := Start(context.Background(), Options{RepoRoot: root, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s: %+v", time.Since(start).Round(time.Millisecond), c.Info())
	c.Stop()
}
