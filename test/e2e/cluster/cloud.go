package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitCloud waits for the fakecloud pod to be ready and registers every node as an instance in its zone through
// fakecloud's admin API, as test/e2e/kind/run.sh does on kind.
func (c *Cluster) waitCloud(ctx context.Context) error {
	var podIP string
	if err := poll(ctx, 3*time.Minute, "fakecloud pod ready", func(ctx context.Context) (bool, error) {
		pods, err := c.client.CoreV1().Pods("diskforge-system").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=fakecloud"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if podReady(&p) && p.Status.PodIP != "" {
				podIP = p.Status.PodIP
				return true, nil
			}
		}
		return false, fmt.Errorf("%d fakecloud pods, none ready: %s", len(pods.Items), podsStatus(pods.Items))
	}); err != nil {
		return err
	}
	c.info.CloudURL = "http://" + podIP + ":8787"
	if err := c.relayInstanceMetadata(podIP); err != nil {
		return err
	}
	c.info.CloudVolumesDir = "/var/lib/fakecloud/volumes"
	for _, n := range nodeSpecs {
		body := fmt.Sprintf(`{"zone":%q,"instanceType":%q}`, n.Zone, n.InstanceType)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.info.CloudURL+"/admin/instances/"+n.InstanceID, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.info.Cloud.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("register instance %s: %w", n.InstanceID, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("register instance %s: %s", n.InstanceID, resp.Status)
		}
	}
	c.logf("fakecloud at %s knows %d instances", c.info.CloudURL, len(nodeSpecs))
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podsStatus(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		st := fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				st += fmt.Sprintf(" %s: %s %s", cs.Name, w.Reason, w.Message)
			}
			if cs.RestartCount > 0 {
				st += fmt.Sprintf(" %s restarts=%d", cs.Name, cs.RestartCount)
			}
		}
		s = append(s, st)
	}
	return strings.Join(s, "; ")
}

// waitWorkloads waits until every Deployment and DaemonSet of the overlay has all its pods ready.
func (c *Cluster) waitWorkloads(ctx context.Context) error {
	for _, w := range c.workloads {
		if err := poll(ctx, 4*time.Minute, w.kind+" "+w.namespace+"/"+w.name+" ready", func(ctx context.Context) (bool, error) {
			var want, ready int32
			switch w.kind {
			case "Deployment":
				d, err := c.client.AppsV1().Deployments(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				want, ready = *d.Spec.Replicas, d.Status.ReadyReplicas
			case "DaemonSet":
				d, err := c.client.AppsV1().DaemonSets(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				want, ready = d.Status.DesiredNumberScheduled, d.Status.NumberReady
			}
			if want > 0 && ready == want {
				return true, nil
			}
			pods, err := c.client.CoreV1().Pods(w.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			return false, fmt.Errorf("%d of %d ready; pods: %s", ready, want, podsStatus(pods.Items))
		}); err != nil {
			return err
		}
	}
	return nil
}
