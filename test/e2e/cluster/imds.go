package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Instance metadata, as each machine of a cloud sees its own: on EC2 a node reaches its instance's metadata at
// one address, served by the hypervisor. Here fakecloud serves each instance's metadata on a port of its own
// (--imds), and the harness plays the hypervisor: a TCP relay on each node's address forwards to that node's
// port. The node plugin reads the address from its pod's host IP (AWS_EC2_METADATA_SERVICE_ENDPOINT), so that one
// DaemonSet reaches three instances. The kind overlay stays as it is: kind's nodes have no such relay, and the
// plugin then keeps its instance type's limit.
const (
	imdsNodePort  = 8788  // on each node's address
	imdsCloudPort = 18001 // fakecloud's listener of the first node; the others follow
)

// imdsEndpointEnv is the node plugin's metadata endpoint: its node's address, from the downward API.
var imdsEndpointEnv = []any{
	map[string]any{"name": "HOST_IP", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.hostIP"}}},
	map[string]any{"name": "AWS_EC2_METADATA_SERVICE_ENDPOINT", "value": fmt.Sprintf("http://$(HOST_IP):%d", imdsNodePort)},
}

// withInstanceMetadata adds fakecloud's per-instance metadata listeners to its Deployment and the metadata endpoint
// to the node plugin's container.
func withInstanceMetadata(objs []*unstructured.Unstructured) error {
	var pairs []string
	for i, n := range nodeSpecs {
		pairs = append(pairs, fmt.Sprintf("%s=0.0.0.0:%d", n.InstanceID, imdsCloudPort+i))
	}
	var cloud, plugin bool
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "fakecloud":
			cloud = true
			if err := editContainer(o, "fakecloud", func(c map[string]any) {
				args, _ := c["args"].([]any)
				c["args"] = append(args, "--imds="+strings.Join(pairs, ","))
			}); err != nil {
				return err
			}
		case o.GetKind() == "DaemonSet" && o.GetName() == "diskforge-node":
			plugin = true
			if err := editContainer(o, "driver", func(c map[string]any) {
				env, _ := c["env"].([]any)
				c["env"] = append(env, imdsEndpointEnv...)
			}); err != nil {
				return err
			}
		}
	}
	if !cloud || !plugin {
		return fmt.Errorf("instance metadata: the overlay lacks fakecloud's Deployment (%v) or the node DaemonSet (%v)", cloud, plugin)
	}
	return nil
}

// editContainer edits the named container of a workload's pod template in place.
func editContainer(o *unstructured.Unstructured, name string, edit func(map[string]any)) error {
	containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			edit(m)
			return unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
		}
	}
	return fmt.Errorf("%s %s has no container %q", o.GetKind(), o.GetName(), name)
}

// relayInstanceMetadata listens on each node's metadata address and relays every connection to fakecloud's
// listener of that node's instance, at cloudIP. The relays stop with the cluster.
func (c *Cluster) relayInstanceMetadata(cloudIP string) error {
	var relays []*relay
	stop := func() error {
		for _, r := range relays {
			r.close()
		}
		return nil
	}
	for i, n := range nodeSpecs {
		r, err := startRelay(net.JoinHostPort(n.Address, fmt.Sprint(imdsNodePort)),
			net.JoinHostPort(cloudIP, fmt.Sprint(imdsCloudPort+i)))
		if err != nil {
			_ = stop()
			return fmt.Errorf("instance metadata of %s: %w", n.Name, err)
		}
		relays = append(relays, r)
	}
	c.undo = append(c.undo, stop)
	c.logf("instance metadata of %d nodes relayed from <node address>:%d to fakecloud", len(relays), imdsNodePort)
	return nil
}

// relay copies TCP connections from a listener to one target address.
type relay struct {
	lis    net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func startRelay(listen, target string) (*relay, error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	r := &relay{lis: lis, target: target, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		in, err := r.lis.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.pipe(in)
		}()
	}
}

func (r *relay) pipe(in net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	out, err := (&net.Dialer{}).DialContext(ctx, "tcp", r.target)
	cancel()
	if err != nil {
		_ = in.Close()
		return
	}
	if !r.track(in, out) {
		return
	}
	defer r.untrack(in, out)
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(out, in)
	go copyHalf(in, out)
	<-done
	<-done
}

// track registers a connection pair, or closes it when the relay is closing.
func (r *relay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		r.conns[c] = true
	}
	return true
}

func (r *relay) untrack(conns ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(r.conns, c)
	}
}

func (r *relay) close() {
	_ = r.lis.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
