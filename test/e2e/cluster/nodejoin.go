package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A cluster grows and shrinks: AddNode brings up a machine that joins after the install, RemoveNode takes one away
// for good, as a node pool scaling down or a cloud reclaiming an instance does. Neither touches fakecloud: what the
// cloud learns of it, it learns from the Node objects (the kind overlay's kube-nodes mode).

// AddNode starts one of the late nodes (lateNodeSpecs) — containerd with the images, then a kubelet that registers
// a Node without labels of ours or a provider ID — and returns once the Node is Ready. The Node's creation is the
// moment the node joined.
func (c *Cluster) AddNode(ctx context.Context, name string) (NodeInfo, error) {
	i := slices.IndexFunc(lateNodeSpecs, func(s NodeInfo) bool { return s.Name == name })
	if i < 0 {
		return NodeInfo{}, fmt.Errorf("%w: %q is not a late node", ErrUnknownNode, name)
	}
	if _, err := c.nodeByName(name); err == nil {
		return NodeInfo{}, fmt.Errorf("node %s already runs", name)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return NodeInfo{}, fmt.Errorf("runc: %w (Debian's runc; hack/deps.sh installs it)", err)
	}
	start := time.Now()
	n, err := c.startNode(ctx, lateNodeSpecs[i], len(nodeSpecs)+i, runc)
	if n != nil {
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
	}
	if err != nil {
		return NodeInfo{}, fmt.Errorf("node %s: %w", name, err)
	}
	if err := c.waitNodeReady(ctx, n); err != nil {
		return NodeInfo{}, err
	}
	c.logf("%s: joined, Ready in %s", name, time.Since(start).Round(time.Millisecond))
	return n.info, nil
}

// RemoveNode takes a late node away for good, as a cloud terminating its instance does: the machine is lost at once
// (KillNode: kubelet and containers killed, the volumes' filesystems shut down), its mounts and kubelet's loop
// devices go with it, its containerd stops, and then its Node is deleted, as a node pool or the cloud's node
// controller deletes the Node of an instance that is gone. Removing a node that does not run is a no-op.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	if !slices.ContainsFunc(lateNodeSpecs, func(s NodeInfo) bool { return s.Name == name }) {
		return fmt.Errorf("%w: %q is not a late node (the cluster's own nodes stay)", ErrUnknownNode, name)
	}
	n, err := c.nodeByName(name)
	if err != nil {
		return nil
	}
	start := time.Now()
	if n.containerd != nil && !n.containerd.exited() {
		if err := c.killNode(ctx, n); err != nil {
			return err
		}
		released := releaseNodeLoops(n.info.Pid, c.logf)
		dropped, err := dropNodeMounts(ctx, n.info.Pid)
		if err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		if err := c.removePods(n); err != nil {
			c.logf("%s: remove pods: %v", name, err)
		}
		n.containerd.stop(15 * time.Second)
		killShims(n.socket, c.logf)
		c.logf("%s: machine gone (%d mounts dropped, %d loop devices released)", name, dropped, released)
	}
	c.mu.Lock()
	c.nodes = slices.DeleteFunc(c.nodes, func(m *node) bool { return m == n })
	c.mu.Unlock()
	if err := c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Node %s: %w", name, err)
	}
	c.logf("%s: removed, its Node deleted, in %s", name, time.Since(start).Round(time.Millisecond))
	return nil
}
