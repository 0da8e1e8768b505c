package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/labels"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerRef names a running container of a pod on a node: the pod by name, or by labels (every one must
// match), and the container by name.
type containerRef struct {
	namespace, pod string
	selector       map[string]string
	container      string
}

func (r containerRef) String() string { return r.namespace + "/" + r.pod + "/" + r.container }

// ErrNoContainer is returned when no running container, or more than one, matches what SignalContainer names.
var ErrNoContainer = errors.New("no single running container matches")

// CRI labels of containers and sandboxes (kubelet's).
const (
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodName       = "io.kubernetes.pod.name"
	labelContainerName = "io.kubernetes.container.name"
)

// SignalContainer sends sig to the main process of a running container on the node (through the node's
// containerd, as `ctr tasks kill` does: the container's own PID 1) and waits until the container has exited (its
// exit code is logged). pod is the pod's name, or a label selector of equalities ("app=x,role=y") that one pod of
// the namespace on this node matches; container is the container's name. A kubelet that runs restarts it as a new
// container, as the pod's restartPolicy says. ctx bounds the wait: a process may take its time (a node plugin
// waiting for its volumes to go) or ignore the signal.
func (c *Cluster) SignalContainer(ctx context.Context, node, namespace, pod, container string, sig syscall.Signal) error {
	_, err := c.signalContainer(ctx, node, namespace, pod, container, sig)
	return err
}

func (c *Cluster) signalContainer(ctx context.Context, node, namespace, pod, container string, sig syscall.Signal) (int32, error) {
	n, err := c.nodeByName(node)
	if err != nil {
		return 0, err
	}
	ref := containerRef{namespace: namespace, pod: pod, container: container}
	if strings.Contains(pod, "=") {
		if ref.selector, err = labels.ConvertSelectorToLabelsMap(pod); err != nil {
			return 0, fmt.Errorf("pod selector %q: %w", pod, err)
		}
	}
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	id, err := findContainer(ctx, rt, ref)
	if err != nil {
		return 0, fmt.Errorf("%s on %s: %w", ref, node, err)
	}
	if _, err := c.ctr(ctx, n, "tasks", "kill", "--signal", strconv.Itoa(int(sig)), id); err != nil {
		return 0, err
	}
	start := time.Now()
	var code int32
	for {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return 0, fmt.Errorf("status of %s (%s): %w", ref, id, err)
		}
		if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			code = st.Status.ExitCode
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s (%s) still runs %s after %s: %w", ref, id, time.Since(start).Round(time.Millisecond),
				sig, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	c.logf("%s: %s exited with %d %s after %s", node, ref, code, time.Since(start).Round(time.Millisecond), sig)
	return code, nil
}

// findContainer returns the ID of the one running container that ref names.
func findContainer(ctx context.Context, rt runtimeapi.RuntimeServiceClient, ref containerRef) (string, error) {
	if ref.namespace == "" || ref.container == "" || ref.pod == "" {
		return "", errors.New("name a namespace, a pod (or a selector) and a container")
	}
	running := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	var filters []*runtimeapi.ContainerFilter
	if ref.selector == nil {
		filters = append(filters, &runtimeapi.ContainerFilter{State: running, LabelSelector: map[string]string{
			labelPodNamespace: ref.namespace, labelPodName: ref.pod, labelContainerName: ref.container}})
	} else {
		sel := maps.Clone(ref.selector)
		sel[labelPodNamespace] = ref.namespace
		sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: sel}})
		if err != nil {
			return "", err
		}
		for _, s := range sandboxes.Items {
			filters = append(filters, &runtimeapi.ContainerFilter{State: running, PodSandboxId: s.Id,
				LabelSelector: map[string]string{labelContainerName: ref.container}})
		}
	}
	var ids []string
	for _, f := range filters {
		list, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			return "", err
		}
		for _, ctr := range list.Containers {
			ids = append(ids, ctr.Id)
		}
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("%w: %d found", ErrNoContainer, len(ids))
	}
	return ids[0], nil
}
