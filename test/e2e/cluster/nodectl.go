package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The node-control API: what happens to a machine in a cluster's life, on the local cluster's nodes. A node is a
// containerd and a kubelet in a mount namespace of their own (nodes.go); its containers are children of
// containerd's shims, so they outlive the kubelet as they do under systemd. Every call is safe to make
// concurrently with the others and with the nodes' SSH sessions; once Stop has begun, nothing starts again.

// ErrUnknownNode is returned for a node name the cluster does not have.
var ErrUnknownNode = errors.New("no such node")

// kubeletStopTimeout bounds a graceful stop before SIGKILL (systemd waits 90 s; kubelet exits at once).
const kubeletStopTimeout = 30 * time.Second

func (c *Cluster) nodeByName(name string) (*node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.info.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownNode, name)
}

func (n *node) currentKubelet() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet
}

// StopKubelet stops the node's kubelet as `systemctl stop kubelet` does: SIGTERM to its process group, SIGKILL
// after 30 s, and returns once it has exited. The node's containers keep running; the Node goes NotReady only
// when the node lifecycle controller notices the missing heartbeats. Stopping a stopped kubelet is a no-op.
func (c *Cluster) StopKubelet(ctx context.Context, node string) error {
	n, err := c.nodeByName(node)
	if err != nil {
		return err
	}
	return c.stopKubelet(ctx, n, syscall.SIGTERM)
}

// stopKubelet sends sig to the kubelet's process group and waits for it to exit (SIGKILL after
// kubeletStopTimeout). SIGTERM is a stop on request (inactive); any other signal leaves it failed.
func (c *Cluster) stopKubelet(ctx context.Context, n *node, sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.kubelet
	if p == nil || p.exited() {
		return nil
	}
	n.kubeletStopped = sig == syscall.SIGTERM
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("stop kubelet of %s: %w", n.info.Name, ctx.Err())
	case <-time.After(kubeletStopTimeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	c.logf("%s: kubelet (pid %d) stopped by %s", n.info.Name, p.cmd.Process.Pid, sig)
	return nil
}

// StartKubelet starts the node's kubelet again, with the flags and configuration it first started with, and
// returns once the Node is Ready with a heartbeat of the new kubelet. A running kubelet is left as it is (and
// the Node awaited Ready).
func (c *Cluster) StartKubelet(ctx context.Context, node string) error {
	n, err := c.nodeByName(node)
	if err != nil {
		return err
	}
	before := c.readyHeartbeat(ctx, n.info.Name)
	started, err := c.startKubelet(n)
	if err != nil {
		return err
	}
	if !started {
		return c.waitNodeReady(ctx, n)
	}
	return c.waitReadyAfter(ctx, n, before)
}

// startKubelet starts the kubelet unless it runs; started says whether it did.
func (c *Cluster) startKubelet(n *node) (started bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet != nil && !n.kubelet.exited() {
		return false, nil
	}
	if n.containerd.exited() {
		return false, fmt.Errorf("start kubelet of %s: its containerd exited", n.info.Name)
	}
	p, err := c.startRole(roleKubelet, n.info.Name+"-kubelet", "nsenter", n.kubeletArgs)
	if err != nil {
		return false, fmt.Errorf("start kubelet of %s: %w", n.info.Name, err)
	}
	n.kubelet, n.kubeletStopped = p, false
	return true, nil
}

// KubeletPID is the process ID of the node's running kubelet (what systemctl's Main PID says).
func (c *Cluster) KubeletPID(node string) (int, error) {
	n, err := c.nodeByName(node)
	if err != nil {
		return 0, err
	}
	p := n.currentKubelet()
	if p == nil || p.exited() {
		return 0, fmt.Errorf("kubelet of %s is not running", node)
	}
	return p.cmd.Process.Pid, nil
}

// readyHeartbeat is the Node's Ready heartbeat now (zero if it has none yet).
func (c *Cluster) readyHeartbeat(ctx context.Context, name string) time.Time {
	node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// waitReadyAfter waits until the Node is Ready with a heartbeat later than before: one the new kubelet sent (the
// last status of the old one may still say Ready).
func (c *Cluster) waitReadyAfter(ctx context.Context, n *node, before time.Time) error {
	return poll(ctx, 3*time.Minute, "node "+n.info.Name+" Ready after its kubelet started", func(ctx context.Context) (bool, error) {
		if p := n.currentKubelet(); p.exited() {
			return false, fmt.Errorf("kubelet exited: %s", p.tail())
		}
		node, err := c.client.CoreV1().Nodes().Get(ctx, n.info.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				fresh := cond.LastHeartbeatTime.After(before)
				return fresh && cond.Status == corev1.ConditionTrue,
					fmt.Errorf("Ready=%s (%s), heartbeat %s (new: %t)", cond.Status, cond.Reason, cond.LastHeartbeatTime, fresh)
			}
		}
		return false, nil
	})
}

// KillNode makes the node a lost machine: its kubelet is SIGKILLed, every process of every container of the node
// (pod sandboxes included) is SIGKILLed, and the filesystems of its volumes (ext4, xfs) are shut down without
// flushing, as power loss leaves them: what was synced is on the disk, nothing more reaches it (their mounts stay,
// dead, until RestartNode). The node's containerd stays, so that RestartNode can bring the node back; the Node
// goes NotReady when the node lifecycle controller notices. Pods of a lost node-a1 include fakecloud's: lose
// node-a2 or node-b1 to keep the cloud.
func (c *Cluster) KillNode(ctx context.Context, node string) error {
	n, err := c.nodeByName(node)
	if err != nil {
		return err
	}
	return c.killNode(ctx, n)
}

func (c *Cluster) killNode(ctx context.Context, n *node) error {
	start := time.Now()
	if err := c.stopKubelet(ctx, n, syscall.SIGKILL); err != nil {
		return err
	}
	killed, err := c.killTasks(ctx, n)
	if err != nil {
		return fmt.Errorf("kill the containers of %s: %w", n.info.Name, err)
	}
	shut, err := shutdownVolumeFilesystems(n.info.Pid)
	if err != nil {
		return fmt.Errorf("shut down the volumes' filesystems of %s: %w", n.info.Name, err)
	}
	c.logf("%s: lost (kubelet and %d containers killed, %d filesystems shut down) in %s", n.info.Name, killed,
		shut, time.Since(start).Round(time.Millisecond))
	return nil
}

// RestartNode power-cycles the node: it is lost first if it is not yet (KillNode), then it comes back as from a
// reboot: the node's mounts below /var/lib/kubelet/pods and /var/lib/kubelet/plugins are gone (detached; their
// filesystems were shut down, so nothing is written), kubelet's own loop devices of the node released, and its
// kubelet starts. It returns once the Node is Ready with the new kubelet's heartbeat and every DaemonSet pod of
// the node (the node plugin) runs again, its containers started after the reboot: kubelet then reconciles the
// node's volumes with the plugin (stages and publishes again for pods still bound to the node, cleans up the
// others). The disks stay attached, as EC2 volumes do across a reboot.
func (c *Cluster) RestartNode(ctx context.Context, node string) error {
	n, err := c.nodeByName(node)
	if err != nil {
		return err
	}
	start := time.Now()
	before := c.readyHeartbeat(ctx, n.info.Name)
	if err := c.killNode(ctx, n); err != nil {
		return err
	}
	// The loop devices first: their backing paths name the node's files only while the mounts are there.
	released := releaseNodeLoops(n.info.Pid, c.logf)
	dropped, err := dropNodeMounts(ctx, n.info.Pid)
	if err != nil {
		return fmt.Errorf("reboot %s: %w", n.info.Name, err)
	}
	c.logf("%s: reboot: %d mounts dropped, %d loop devices released", n.info.Name, dropped, released)
	if _, err := c.startKubelet(n); err != nil {
		return err
	}
	if err := c.waitReadyAfter(ctx, n, before); err != nil {
		return err
	}
	if err := c.waitDaemonPodsRestarted(ctx, n, start); err != nil {
		return err
	}
	c.logf("%s: back after a reboot in %s", n.info.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// waitDaemonPodsRestarted waits until every DaemonSet pod bound to the node is Ready with all its containers
// started at or after since.
func (c *Cluster) waitDaemonPodsRestarted(ctx context.Context, n *node, since time.Time) error {
	since = since.Truncate(time.Second) // the API's times have seconds
	return poll(ctx, 3*time.Minute, "DaemonSet pods of "+n.info.Name+" running again", func(ctx context.Context) (bool, error) {
		pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.info.Name).String()})
		if err != nil {
			return false, err
		}
		var waiting []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !ownedByDaemonSet(&p) {
				continue
			}
			if !podReady(&p) || !startedSince(&p, since) {
				waiting = append(waiting, p.Namespace+"/"+p.Name)
			}
		}
		if len(waiting) > 0 {
			return false, fmt.Errorf("not yet running again: %s", strings.Join(waiting, ", "))
		}
		return true, nil
	})
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

func startedSince(p *corev1.Pod, since time.Time) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.Time.Before(since) {
			return false
		}
	}
	return true
}

// ctr runs containerd's ctr against the node's containerd, in the namespace the CRI uses.
func (c *Cluster) ctr(ctx context.Context, n *node, args ...string) (string, error) {
	full := append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)
	cmd := exec.CommandContext(ctx, c.bin("ctr"), full...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// nodeTasks lists the node's containerd tasks (containers and pod sandboxes) that have not stopped.
func (c *Cluster) nodeTasks(ctx context.Context, n *node) ([]string, error) {
	out, err := c.ctr(ctx, n, "tasks", "ls")
	if err != nil {
		return nil, err
	}
	return parseTaskList(out), nil
}

// parseTaskList reads `ctr tasks ls` (TASK PID STATUS) and returns the tasks that are not STOPPED.
func parseTaskList(out string) []string {
	var ids []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] == "TASK" {
			continue // the header, or an empty line
		}
		if f[2] != "STOPPED" {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// killTasks SIGKILLs every process of every task of the node and waits until none runs; it returns how many
// tasks it killed.
func (c *Cluster) killTasks(ctx context.Context, n *node) (int, error) {
	ids, err := c.nodeTasks(ctx, n)
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		// A task that ends meanwhile answers an error: what counts is the wait below.
		_, _ = c.ctr(ctx, n, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	err = poll(ctx, time.Minute, "the containers of "+n.info.Name+" to die", func(ctx context.Context) (bool, error) {
		left, err := c.nodeTasks(ctx, n)
		if err != nil {
			return false, err
		}
		for _, id := range left {
			_, _ = c.ctr(ctx, n, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
		}
		return len(left) == 0, fmt.Errorf("still running: %s", strings.Join(left, ", "))
	})
	return len(ids), err
}

// nodeSSH is a node as its SSH sessions see it (nodeHost).
type nodeSSH struct {
	c *Cluster
	n *node
	// path is the PATH of the node's shell command lines: the harness's sudo and systemctl first.
	path string
}

func (h *nodeSSH) StopKubelet(ctx context.Context) error {
	return h.c.stopKubelet(ctx, h.n, syscall.SIGTERM)
}

func (h *nodeSSH) StartKubelet(context.Context) error {
	_, err := h.c.startKubelet(h.n)
	return err
}

// KillKubelet is `systemctl kill`: the signal goes to the kubelet's process group, without waiting.
func (h *nodeSSH) KillKubelet(_ context.Context, sig syscall.Signal) error {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	p := h.n.kubelet
	if p == nil || p.exited() {
		return nil
	}
	h.n.kubeletStopped = false
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (h *nodeSSH) KubeletState() unitState { return h.n.kubeletState() }

func (n *node) kubeletState() unitState {
	n.mu.Lock()
	p, stopped := n.kubelet, n.kubeletStopped
	n.mu.Unlock()
	if p == nil {
		return unitState{Active: "inactive", Result: "success"}
	}
	if !p.exited() {
		return unitState{Active: "active", Result: "success", MainPID: p.cmd.Process.Pid, Since: p.started}
	}
	st := unitState{Active: "inactive", Result: "success", Since: p.ended}
	if stopped {
		return st
	}
	st.Active = "failed"
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Result = "signal"
	} else if p.cmd.ProcessState.ExitCode() != 0 {
		st.Result = "exit-code"
	}
	return st
}

// Shell runs the command line with sh in the node's mount namespace, as root, and returns its exit status (128 +
// the signal for one that a signal ended). Its process group is killed when ctx ends.
func (h *nodeSSH) Shell(ctx context.Context, cmdline string, stdout, stderr io.Writer) (int, error) {
	if h.n.containerd.exited() {
		return 255, fmt.Errorf("node %s is down (its containerd exited)", h.n.info.Name)
	}
	cmd := exec.CommandContext(ctx, "nsenter", "--mount=/proc/"+strconv.Itoa(h.n.info.Pid)+"/ns/mnt", "--",
		"/bin/sh", "-c", cmdline)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + h.path, "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/sh", "LANG=C.UTF-8"}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 255, err
	}
	return 0, nil
}

// shims are the node shell's sudo and systemctl. Root needs no sudo: it runs its command. systemctl verbs for
// kubelet are served when they are the whole SSH command line (runNodeCommand); inside a longer shell line they
// would reach nothing, which the shim says.
var shims = map[string]string{
	"sudo": `#!/bin/sh
# diskforge e2e node: commands run as root; sudo runs its command.
while [ $# -gt 0 ]; do
  case "$1" in
    --version|-V) printf 'Sudo version 1.9.13p3\n'; exit 0 ;;
    -u|-g|-C|-h|-p|-U) shift; [ $# -gt 0 ] && shift ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: sudo command" >&2; exit 1; }
exec "$@"
`,
	"systemctl": `#!/bin/sh
echo "systemctl: this e2e node serves 'systemctl <verb> kubelet' only as a whole SSH command, not inside a shell line" >&2
exit 1
`,
}

// startSSH generates the run's keys, writes the client key and the shims, and serves SSH on every node's
// address, port 22.
func (c *Cluster) startSSH(ctx context.Context) error {
	keys, err := newSSHKeys()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.info.WorkDir, "ssh")
	keyFile, err := keys.writeClientKey(dir)
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for name, script := range shims {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			return err
		}
	}
	c.ssh = newSSHServer(ctx, keys, SSHUser, c.logf)
	path := bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, n := range c.nodes {
		addr, err := c.ssh.serve(net.JoinHostPort(n.info.Address, "22"), n.info.Name, &nodeSSH{c: c, n: n, path: path})
		if err != nil {
			return fmt.Errorf("ssh endpoint of %s: %w", n.info.Name, err)
		}
		c.logf("%s: ssh on %s", n.info.Name, addr)
	}
	c.info.SSH = SSHInfo{KeyFile: keyFile, User: SSHUser}
	return nil
}
