package nodelife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	startupNoExecute  = corev1.Taint{Key: StartupTaintKey, Effect: corev1.TaintEffectNoExecute}
	startupNoSchedule = corev1.Taint{Key: StartupTaintKey, Effect: corev1.TaintEffectNoSchedule}
	otherTaint        = corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	lateTaint         = corev1.Taint{Key: "example.com/late", Effect: corev1.TaintEffectPreferNoSchedule}
	nodesResource     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

func taintRemover(client *fake.Clientset) *StartupTaint {
	return &StartupTaint{Client: client, NodeName: testNode, DriverName: testDriver,
		RegistrationPoll: time.Millisecond, RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond}
}

func taintsOf(t *testing.T, client *fake.Clientset) []corev1.Taint {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Taints
}

func patches(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// TestStartupTaintRemoved: the taint goes whatever its effect (both when the node pool set both), every other
// taint stays, and a Node without it is not patched.
func TestStartupTaintRemoved(t *testing.T) {
	tests := []struct {
		name        string
		taints      []corev1.Taint
		want        []corev1.Taint
		wantPatches int
	}{
		{"only the startup taint", []corev1.Taint{startupNoExecute}, nil, 1},
		{"others kept in order", []corev1.Taint{otherTaint, startupNoExecute, lateTaint}, []corev1.Taint{otherTaint, lateTaint}, 1},
		{"both effects", []corev1.Taint{startupNoSchedule, otherTaint, startupNoExecute}, []corev1.Taint{otherTaint}, 1},
		{"no startup taint", []corev1.Taint{otherTaint}, []corev1.Taint{otherTaint}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, tc.taints...), csiNode(testNode, "other.csi.example.com", testDriver))
			if _, err := taintRemover(client).Run(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if got := taintsOf(t, client); !slices.Equal(got, tc.want) {
				t.Errorf("taints = %v, want %v", got, tc.want)
			}
			if got := patches(client); got != tc.wantPatches {
				t.Errorf("%d patches of the Node, want %d", got, tc.wantPatches)
			}
		})
	}
}

// TestStartupTaintWaitsForRegistration: no patch before the CSINode lists the driver, whether the Node carries
// the taint when the plugin starts or a node manager puts it on while kubelet has not registered the driver yet.
// kubelet registers the driver at the fourth look: first no CSINode, then one without the driver.
func TestStartupTaintWaitsForRegistration(t *testing.T) {
	for _, tc := range []struct {
		name        string
		atStart     []corev1.Taint
		whileUnregd []corev1.Taint // the Node's taints from the second look on, when set
	}{
		{"tainted at start", []corev1.Taint{startupNoExecute, otherTaint}, nil},
		{"tainted while starting", []corev1.Taint{otherTaint}, []corev1.Taint{otherTaint, startupNoSchedule}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, tc.atStart...))
			var gets atomic.Int32
			var registered, patchedEarly, put atomic.Bool
			// putOn is the node manager's taint, once: at the second look at the CSINode, or as a read of the
			// Node before it is answered (a plugin that looks at its Node before the registration sees it
			// untainted).
			putOn := func() {
				if tc.whileUnregd == nil || put.Swap(true) {
					return
				}
				if err := client.Tracker().Update(nodeResource, node(testNode, tc.whileUnregd...), ""); err != nil {
					t.Error(err)
				}
			}
			client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.whileUnregd == nil || put.Load() {
					return false, nil, nil
				}
				putOn()
				return true, node(testNode, tc.atStart...), nil
			})
			client.PrependReactor("get", "csinodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				switch gets.Add(1) {
				case 1:
					return false, nil, nil
				case 2:
					if err := client.Tracker().Add(csiNode(testNode, "other.csi.example.com")); err != nil {
						t.Error(err)
					}
					putOn()
				case 4:
					if err := client.Tracker().Update(csiResource, csiNode(testNode, "other.csi.example.com", testDriver), ""); err != nil {
						t.Error(err)
					}
					registered.Store(true)
				}
				return false, nil, nil
			})
			client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				if !registered.Load() {
					patchedEarly.Store(true)
				}
				return false, nil, nil
			})
			if _, err := taintRemover(client).Run(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if patchedEarly.Load() {
				t.Error("the Node was patched before kubelet registered the driver")
			}
			if got := taintsOf(t, client); !slices.Equal(got, []corev1.Taint{otherTaint}) {
				t.Errorf("taints = %v, want %v", got, []corev1.Taint{otherTaint})
			}
		})
	}
}

var nodeResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

var csiResource = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"}

// TestStartupTaintRetries: a conflict, a refusal by RBAC or a taint added between read and patch (the patch's
// test fails) is retried until the removal goes through, and a taint added meanwhile is kept.
func TestStartupTaintRetries(t *testing.T) {
	tests := []struct {
		name string
		// fail answers the patch of the given attempt (from 1): handled with that error, or passed on.
		fail func(t *testing.T, client *fake.Clientset, attempt int32) (bool, error)
		want []corev1.Taint
	}{
		{"conflict", func(_ *testing.T, _ *fake.Clientset, attempt int32) (bool, error) {
			if attempt == 1 {
				return true, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, testNode, nil)
			}
			return false, nil
		}, []corev1.Taint{otherTaint}},
		{"forbidden", func(_ *testing.T, _ *fake.Clientset, attempt int32) (bool, error) {
			if attempt <= 3 {
				return true, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, testNode, nil)
			}
			return false, nil
		}, []corev1.Taint{otherTaint}},
		{"taint added concurrently", func(t *testing.T, client *fake.Clientset, attempt int32) (bool, error) {
			if attempt == 1 {
				// Another controller adds a taint after the remover read the Node: the patch's test must fail.
				if err := client.Tracker().Update(nodesResource, node(testNode, otherTaint, startupNoExecute, lateTaint), ""); err != nil {
					t.Error(err)
				}
			}
			return false, nil
		}, []corev1.Taint{otherTaint, lateTaint}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(testNode, otherTaint, startupNoExecute), csiNode(testNode, testDriver))
			var attempts atomic.Int32
			client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				handled, err := tc.fail(t, client, attempts.Add(1))
				return handled, nil, err
			})
			if _, err := taintRemover(client).Run(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if got := taintsOf(t, client); !slices.Equal(got, tc.want) {
				t.Errorf("taints = %v, want %v", got, tc.want)
			}
			if attempts.Load() < 2 {
				t.Errorf("%d patch attempts; the first failed, so there must be another", attempts.Load())
			}
		})
	}
}

// TestStartupTaintForbiddenReadRetries: the Node cannot be read at first (RBAC not yet granted); the remover
// keeps trying, and stops only when ctx ends.
func TestStartupTaintForbiddenReadRetries(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupNoExecute), csiNode(testNode, testDriver))
	var reads atomic.Int32
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads.Add(1) <= 5 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, testNode, nil)
		}
		return false, nil, nil
	})
	if _, err := taintRemover(client).Run(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := taintsOf(t, client); len(got) != 0 {
		t.Errorf("taints = %v, want none", got)
	}

	// Refused for good: Run returns only with its context, having tried again and again.
	client = fake.NewClientset(node(testNode, startupNoExecute), csiNode(testNode, testDriver))
	ctx, cancel := context.WithCancel(testCtx(t))
	var refused atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) == 20 {
			cancel()
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, testNode, nil)
	})
	if _, err := taintRemover(client).Run(ctx); err == nil {
		t.Error("Run succeeded though every patch was refused")
	}
	if refused.Load() < 20 {
		t.Errorf("%d patch attempts before giving up; want retries until the context ended", refused.Load())
	}
	if got := taintsOf(t, client); !slices.Equal(got, []corev1.Taint{startupNoExecute}) {
		t.Errorf("taints = %v after refused patches, want the startup taint still there", got)
	}
}

// serveTaint runs Serve until the returned stop is called; stop returns once Serve has.
func serveTaint(t *testing.T, client *fake.Clientset) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- taintRemover(client).Serve(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Serve = %v, want the context's end", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// putBack updates the Node as a node manager does: taints (the startup taint among them) and cordon.
func putBack(t *testing.T, client *fake.Clientset, unschedulable bool, taints ...corev1.Taint) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints, n.Spec.Unschedulable = taints, unschedulable
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func untainted(t *testing.T, client *fake.Clientset, want ...corev1.Taint) func() bool {
	return func() bool { return slices.Equal(taintsOf(t, client), want) }
}

// stays checks for a while that the startup taint stays on the Node and that nothing patches it.
func stays(t *testing.T, client *fake.Clientset, what string) {
	t.Helper()
	before := patches(client)
	for range 100 {
		if !hasTaint(&corev1.Node{Spec: corev1.NodeSpec{Taints: taintsOf(t, client)}}, StartupTaintKey) || patches(client) != before {
			t.Fatalf("%s: the startup taint was removed (taints %v)", what, taintsOf(t, client))
		}
		time.Sleep(3 * time.Millisecond)
	}
}

// TestStartupTaintPutBack: a node manager puts the taint back on a serving plugin's Node, again and again; each
// time it goes, and the other taints stay.
func TestStartupTaintPutBack(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupNoExecute, otherTaint), csiNode(testNode, testDriver))
	serveTaint(t, client)
	eventually(t, "the startup taint removed at start", untainted(t, client, otherTaint))
	for i := range 3 {
		putBack(t, client, false, otherTaint, startupNoSchedule, lateTaint)
		eventually(t, fmt.Sprintf("the startup taint put back (%d) removed again", i+1), untainted(t, client, otherTaint, lateTaint))
		putBack(t, client, false, otherTaint)
	}
}

// TestStartupTaintPutBackDraining: on a Node being drained the taint put back stays, until the Node is back in
// service; once the plugin begins to shut down it stays for good.
func TestStartupTaintPutBackDraining(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupNoExecute), csiNode(testNode, testDriver))
	stop := serveTaint(t, client)
	eventually(t, "the startup taint removed at start", untainted(t, client))

	putBack(t, client, true)
	putBack(t, client, true, startupNoExecute)
	stays(t, client, "cordoned Node")
	putBack(t, client, false, startupNoExecute)
	eventually(t, "the startup taint removed once the Node is uncordoned", untainted(t, client))

	stop()
	putBack(t, client, false, startupNoExecute)
	stays(t, client, "after shutdown began")
}

// TestStartupTaintPutBackRetries: a removal that fails (RBAC refusing the patch for a while) is tried again
// without waiting for the Node to change.
func TestStartupTaintPutBackRetries(t *testing.T) {
	client := fake.NewClientset(node(testNode), csiNode(testNode, testDriver))
	var refuse atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Add(-1) >= 0 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, testNode, nil)
		}
		return false, nil, nil
	})
	serveTaint(t, client)
	refuse.Store(3)
	putBack(t, client, false, startupNoExecute, otherTaint)
	eventually(t, "the startup taint removed after refusals", untainted(t, client, otherTaint))
	if n := refuse.Load(); n >= 0 {
		t.Errorf("%d refusals left: the removal was not retried", n+1)
	}
}
