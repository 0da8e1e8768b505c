// Package nodelife is the node plugin's life as an agent of its Kubernetes Node: it lifts the Node's startup
// taint once kubelet has registered the plugin, and again whenever it comes back (StartupTaint), holds the plugin's exit while the Node is drained
// or shut down until its volumes are detached (Shutdown), and keeps the attach limit NodeGetInfo reports in step
// with the volumes the instance really holds (Limits), from the VolumeAttachments of the driver on the Node
// (Attachments).
package nodelife

import "time"

// backoff doubles a retry delay from initial up to limit.
type backoff struct{ next, limit time.Duration }

func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.limit)
	return d
}
