//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeControl starts the local cluster and goes through the node-control API and the nodes' SSH endpoints on
// node-b1: the node's own address (and the API server's logs through its kubelet), systemctl over SSH as the
// e2e suite sends it, a container signalled, the node lost and rebooted. Then the cluster stops as usual.
func TestNodeControl(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, Options{RepoRoot: root, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
	const name = "node-b1"
	var info NodeInfo
	for _, n := range c.Info().Nodes {
		if n.Name == name {
			info = n
		}
	}
	step := func(what string, fn func() error) {
		t.Helper()
		s := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %s", what, time.Since(s).Round(time.Millisecond))
	}

	// Each node's InternalIP is its own address; the API server reaches its kubelet there (logs).
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var internal string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		want := ""
		for _, spec := range nodeSpecs {
			if spec.Name == n.Name {
				want = spec.Address
			}
		}
		if internal != want {
			t.Errorf("%s: InternalIP %q, want %q", n.Name, internal, want)
		}
	}
	plugin := nodePluginPod(ctx, t, c, name)
	logs, err := c.client.CoreV1().Pods(plugin.Namespace).GetLogs(plugin.Name,
		&corev1.PodLogOptions{Container: "driver", TailLines: ptr(int64(3))}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s through its kubelet at %s: %v", plugin.Name, info.Address, err)
	}
	t.Logf("logs of %s through the kubelet at %s: %d bytes", plugin.Name, info.Address, len(logs))

	// SSH as e2e.test does.
	client := dialSSH(t, c.Info().SSH, info.Address)
	defer client.Close()
	pid, err := c.KubeletPID(name)
	if err != nil {
		t.Fatal(err)
	}
	out, code := sshRun(t, client, "systemctl status kubelet")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Main PID: %d (kubelet)", pid)) {
		t.Errorf("systemctl status kubelet: exit %d:\n%s\nwant Main PID: %d", code, out, pid)
	}
	if out, code := sshRun(t, client, "sudo --version"); code != 0 || !strings.HasPrefix(out, "Sudo version") {
		t.Errorf("sudo --version: %d %q", code, out)
	}
	// The node's PID 1, as /proc shows it on the node, lives in the node's mount namespace (hostexec pods enter it).
	if out, code := sshRun(t, client, `[ "$(readlink /proc/1/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ] && echo same`); out != "same\n" {
		t.Errorf("the node's /proc/1 is not in its mount namespace: %q (exit %d)", out, code)
	}
	// The node's own mounts: the plugin's registration socket directory is below its kubelet dir.
	if out, code := sshRun(t, client, fmt.Sprintf("mount | grep %s | grep -c kubernetes.io~projected", plugin.UID)); code != 0 {
		t.Errorf("the plugin pod's mounts are not in node %s's mount table (exit %d, %q)", name, code, out)
	}
	step("ssh: sudo systemctl restart kubelet, then the node Ready", func() error {
		before := c.readyHeartbeat(ctx, name)
		if out, code := sshRun(t, client, "sudo systemctl restart kubelet"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		n, _ := c.nodeByName(name)
		return c.waitReadyAfter(ctx, n, before)
	})
	if newPID, err := c.KubeletPID(name); err != nil || newPID == pid {
		t.Errorf("kubelet pid after restart: %d, %v; was %d", newPID, err, pid)
	}
	if out, _ := sshRun(t, client, "systemctl show kubelet --property ActiveState --value"); out != "active\n" {
		t.Errorf("ActiveState after restart: %q", out)
	}

	step("StopKubelet", func() error { return c.StopKubelet(ctx, name) })
	if out, code := sshRun(t, client, "systemctl show kubelet --property ActiveState --value"); out != "inactive\n" || code != 0 {
		t.Errorf("ActiveState after stop: %q (exit %d)", out, code)
	}
	if _, err := c.KubeletPID(name); err == nil {
		t.Error("a stopped kubelet has a pid")
	}
	// Its containers keep running.
	n, _ := c.nodeByName(name)
	tasks, err := c.nodeTasks(ctx, n)
	if err != nil || len(tasks) == 0 {
		t.Errorf("tasks of %s with kubelet stopped: %v, %v; want them running", name, tasks, err)
	}
	step("StartKubelet", func() error { return c.StartKubelet(ctx, name) })

	step("SignalContainer SIGTERM to the node plugin's driver", func() error {
		return c.SignalContainer(ctx, name, plugin.Namespace, "app.kubernetes.io/name=diskforge-node", "driver", syscall.SIGTERM)
	})
	if err := c.SignalContainer(ctx, name, plugin.Namespace, "no-such-pod", "driver", syscall.SIGTERM); err == nil {
		t.Error("a missing pod was signalled")
	}

	// A pod with a volume on the node: what it wrote and synced before the loss is there after the reboot, where
	// kubelet stages and publishes the volume again (the reboot dropped the mounts).
	vol := volumePod(ctx, t, c, name)
	step("KillNode", func() error { return c.KillNode(ctx, name) })
	if tasks, err := c.nodeTasks(ctx, n); err != nil || len(tasks) != 0 {
		t.Errorf("tasks of a lost node: %v, %v; want none", tasks, err)
	}
	if out, code := sshRun(t, client, "systemctl is-active kubelet"); out != "failed\n" || code != 3 {
		t.Errorf("is-active of a lost node's kubelet: %q (exit %d); want failed", out, code)
	}
	step("RestartNode", func() error { return c.RestartNode(ctx, name) })
	if out, code := sshRun(t, client, "systemctl is-active kubelet"); out != "active\n" || code != 0 {
		t.Errorf("is-active after the reboot: %q (exit %d)", out, code)
	}
	step("the volume's pod runs again with its data", func() error { return vol.waitData(ctx, t, c) })
	step("the volume's pod and claim deleted, its mounts gone from the node", func() error {
		return vol.remove(ctx, t, c, client)
	})
	step("StopKubelet then RestartNode", func() error {
		if err := c.StopKubelet(ctx, name); err != nil {
			return err
		}
		return c.RestartNode(ctx, name)
	})
	s := time.Now()
	c.Stop()
	t.Logf("cluster stopped in %s", time.Since(s).Round(time.Millisecond))
	// Nothing of the run is left: no process of the nodes, no bridge.
	if leftovers := processesOf(c.Info().WorkDir); len(leftovers) > 0 {
		t.Errorf("processes left after Stop: %v", leftovers)
	}
	if linkExists(bridgeName) {
		t.Errorf("bridge %s left after Stop", bridgeName)
	}
}

// volPod is a pod on one node with a volume of the ext4 class: it prints what it finds in the volume, then
// writes and syncs its mark.
type volPod struct {
	ns, name, claim string
	uid             string
}

const volMark = "written before the loss"

func volumePod(ctx context.Context, t *testing.T, c *Cluster, node string) *volPod {
	t.Helper()
	v := &volPod{ns: "default", name: "nodectl-vol", claim: "nodectl-vol"}
	class := "diskforge-ext4"
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v.claim, Namespace: v.ns},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := c.client.CoreV1().PersistentVolumeClaims(v.ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := "echo found: $(cat /data/mark 2>/dev/null); echo '" + volMark + "' > /data/mark && sync /data/mark && " +
		"echo synced; exec sleep 3600"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: v.name, Namespace: v.ns},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: TestImage, Command: []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.claim}}}}}}
	created, err := c.client.CoreV1().Pods(v.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.uid = string(created.UID)
	if err := poll(ctx, 3*time.Minute, "pod "+v.name+" synced its mark", func(ctx context.Context) (bool, error) {
		logs, err := v.logs(ctx, c)
		return strings.Contains(logs, "synced"), err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *volPod) logs(ctx context.Context, c *Cluster) (string, error) {
	raw, err := c.client.CoreV1().Pods(v.ns).GetLogs(v.name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	return string(raw), err
}

// waitData waits until the pod's container, started again after the reboot, found the mark.
func (v *volPod) waitData(ctx context.Context, t *testing.T, c *Cluster) error {
	return poll(ctx, 3*time.Minute, "pod "+v.name+" found its mark after the reboot", func(ctx context.Context) (bool, error) {
		logs, err := v.logs(ctx, c)
		return strings.Contains(logs, "found: "+volMark) && strings.Contains(logs, "synced"), fmt.Errorf("logs %q: %v", logs, err)
	})
}

// remove deletes the pod and its claim, and checks over SSH that no mount of the pod is left on the node.
func (v *volPod) remove(ctx context.Context, t *testing.T, c *Cluster, client *ssh.Client) error {
	if err := c.client.CoreV1().Pods(v.ns).Delete(ctx, v.name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, "pod "+v.name+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().Pods(v.ns).Get(ctx, v.name, metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		return err
	}
	if out, code := sshRun(t, client, "mount | grep "+v.uid); code != 1 {
		return fmt.Errorf("mounts of pod %s left on the node (exit %d): %s", v.uid, code, out)
	}
	if err := c.client.CoreV1().PersistentVolumeClaims(v.ns).Delete(ctx, v.claim, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return poll(ctx, 2*time.Minute, "the volume of "+v.claim+" deleted", func(ctx context.Context) (bool, error) {
		pvs, err := c.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		return err == nil && len(pvs.Items) == 0, err
	})
}

func nodePluginPod(ctx context.Context, t *testing.T, c *Cluster, node string) corev1.Pod {
	t.Helper()
	pods, err := c.client.CoreV1().Pods("diskforge-system").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=diskforge-node", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("node plugin pod of %s: %v (%d pods)", node, err, len(pods.Items))
	}
	return pods.Items[0]
}

func dialSSH(t *testing.T, info SSHInfo, addr string) *ssh.Client {
	t.Helper()
	raw, err := os.ReadFile(info.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ssh.Dial("tcp", net.JoinHostPort(addr, "22"), &ssh.ClientConfig{User: info.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// sshRun is runSSH with stdout and stderr together, as a person at the node's terminal reads them.
func sshRun(t *testing.T, client *ssh.Client, cmd string) (string, int) {
	t.Helper()
	stdout, stderr, code := runSSH(t, client, cmd)
	return stdout + stderr, code
}

// processesOf lists the processes whose command line names the work dir (the nodes' containerd, kubelets, shims).
func processesOf(workDir string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err == nil && bytes.Contains(raw, []byte(workDir)) {
			found = append(found, filepath.Base(filepath.Dir(f))+": "+strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return found
}
