package cluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// startCloud runs fakecloud on loop devices, knowing the nodes as instances in their zones.
func (c *Cluster) startCloud(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	data := filepath.Join(c.info.WorkDir, "fakecloud")
	c.info.CloudURL = "http://" + addr
	c.info.CloudVolumesDir = filepath.Join(data, "volumes")
	var instances []string
	for _, n := range nodeSpecs {
		instances = append(instances, n.InstanceID+"="+n.Zone)
	}
	p, err := c.start("fakecloud", filepath.Join(c.opts.RepoRoot, "bin", "fakecloud"), []string{
		"--listen=" + addr, "--data-dir=" + data, "--backend=loop", "--instances=" + strings.Join(instances, ","),
		"--create-duration=200ms", "--attach-duration=200ms", "--detach-duration=200ms", "--delete-duration=200ms",
		"--modifying-duration=200ms", "--optimizing-duration=500ms", "--snapshot-duration=500ms",
	})
	if err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, "fakecloud", func(context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("fakecloud exited: %s", p.tail())
		}
		resp, err := http.Get(c.info.CloudURL + "/healthz")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}
