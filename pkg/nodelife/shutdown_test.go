package nodelife

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestDrainReason(t *testing.T) {
	notReady := node(testNode)
	notReady.Status.Conditions[0].Status = corev1.ConditionUnknown
	cordoned := node(testNode)
	cordoned.Spec.Unschedulable = true
	tests := []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"schedulable and ready", node(testNode, otherTaint), ""},
		{"startup taint is no drain", node(testNode, startupNoExecute), ""},
		{"cordoned", cordoned, "unschedulable"},
		{"unschedulable taint", node(testNode, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), "taint " + corev1.TaintNodeUnschedulable},
		{"kubelet shutting down", node(testNode, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}), "taint " + corev1.TaintNodeNotReady},
		{"cluster autoscaler", node(testNode, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}), "taint ToBeDeletedByClusterAutoscaler"},
		{"not ready yet untainted", notReady, "not ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DrainReason(tc.node); got != tc.want {
				t.Errorf("DrainReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// shutdownFixture: the node holds two attachments of the driver; another node's and another driver's
// attachments never count.
func shutdownFixture(t *testing.T, n *corev1.Node, bound time.Duration) (*fake.Clientset, *Shutdown) {
	client := fake.NewClientset(n,
		attachment(testDriver, testNode, "pv-a", true, "/dev/xvdba"),
		attachment(testDriver, testNode, "pv-b", false, ""),
		attachment(testDriver, "node-2", "pv-c", true, "/dev/xvdba"),
		attachment("other.csi.example.com", testNode, "pv-d", true, ""),
	)
	a := startAttachments(t, client)
	return client, NewShutdown(ShutdownOptions{Client: client, NodeName: testNode, Attachments: a, Bound: bound, Poll: time.Millisecond})
}

// TestShutdownSchedulableStopsAtOnce: a plain DaemonSet restart does not wait for volumes that stay.
func TestShutdownSchedulableStopsAtOnce(t *testing.T) {
	_, s := shutdownFixture(t, node(testNode, otherTaint), time.Hour)
	res := s.Wait(testCtx(t))
	if res.Reason != "" {
		t.Errorf("Wait on a schedulable node = %+v, want no reason", res)
	}
}

// TestShutdownWaitsForAttachments: on a cordoned node the wait lasts until the driver's attachments on the node
// are gone, whatever other nodes and drivers hold.
func TestShutdownWaitsForAttachments(t *testing.T) {
	cordoned := node(testNode)
	cordoned.Spec.Unschedulable = true
	client, s := shutdownFixture(t, cordoned, time.Hour)
	done := make(chan ShutdownResult, 1)
	go func() { done <- s.Wait(testCtx(t)) }()
	for _, name := range []string{"csi-pv-a-" + testNode, "csi-pv-b-" + testNode} {
		select {
		case res := <-done:
			t.Fatalf("Wait returned %+v while attachment %s remained", res, name)
		default:
		}
		if err := client.StorageV1().VolumeAttachments().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res := <-done
	if res.Reason != "unschedulable" || res.Remaining != 0 {
		t.Errorf("Wait = %+v, want reason unschedulable and no attachment left", res)
	}
}

// TestShutdownStopsAtBound: attachments that do not go end the wait at the bound, with what was left.
func TestShutdownStopsAtBound(t *testing.T) {
	draining := node(testNode, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	_, s := shutdownFixture(t, draining, 20*time.Millisecond)
	res := s.Wait(testCtx(t))
	if res.Remaining != 2 || res.Reason == "" {
		t.Errorf("Wait = %+v, want the bound to end it with the node's 2 attachments left", res)
	}
	// A node that cannot be read is not waited for.
	s = NewShutdown(ShutdownOptions{Client: fake.NewClientset(), NodeName: testNode, Attachments: s.opts.Attachments, Bound: time.Hour})
	if res := s.Wait(testCtx(t)); res.Reason != "" || res.Remaining != -1 {
		t.Errorf("Wait without a Node = %+v, want no wait", res)
	}
}

// TestShutdownHandler: the preStop hook's GET returns when the wait ends; other methods are refused.
func TestShutdownHandler(t *testing.T) {
	_, s := shutdownFixture(t, node(testNode), time.Hour)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/prestop")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "waited") {
		t.Errorf("GET = %d %q, want 200 with what was waited for", resp.StatusCode, body)
	}
	resp, err = http.Post(srv.URL+"/prestop", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", resp.StatusCode)
	}
}

// TestShutdownAtExitAfterHook: SIGTERM after the preStop hook's wait does not wait again (kubelet's grace
// period holds both); without a recent wait it waits.
func TestShutdownAtExitAfterHook(t *testing.T) {
	draining := node(testNode, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	client, s := shutdownFixture(t, draining, time.Hour)
	// No hook ran: the exit waits for the attachments like Wait.
	done := make(chan ShutdownResult, 1)
	go func() { done <- s.WaitAtExit(testCtx(t)) }()
	for _, name := range []string{"csi-pv-a-" + testNode, "csi-pv-b-" + testNode} {
		if err := client.StorageV1().VolumeAttachments().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if res := <-done; res.Remaining != 0 || res.Reason == "" {
		t.Fatalf("WaitAtExit = %+v, want a wait until no attachment was left", res)
	}
	// The hook's wait just ran: an attachment that came back since does not hold the exit.
	if _, err := client.StorageV1().VolumeAttachments().Create(context.Background(),
		attachment(testDriver, testNode, "pv-e", true, "/dev/xvdbc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := s.WaitAtExit(testCtx(t)); res.Remaining != 0 {
		t.Errorf("WaitAtExit after a wait = %+v, want that wait's result", res)
	}
}
