package nodelife

import (
	"context"

	storagev1 "k8s.io/api/storage/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// byAttacherNode indexes VolumeAttachments by attacher and node.
const byAttacherNode = "attacherNode"

// Attachments caches the VolumeAttachments of one driver on one node. It watches every VolumeAttachment, since
// the API selects them by no field but the name; the watch costs the API server one event per change, where
// listing them at each NodeGetInfo would cost a full list every few seconds from every node.
type Attachments struct {
	driver, node string
	informer     cache.SharedIndexInformer
}

// NewAttachments caches driver's VolumeAttachments on node; Run fills the cache.
func NewAttachments(client kubernetes.Interface, driver, node string) *Attachments {
	inf := storageinformers.NewVolumeAttachmentInformer(client, 0, cache.Indexers{byAttacherNode: func(obj any) ([]string, error) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok {
			return nil, nil
		}
		return []string{va.Spec.Attacher + "/" + va.Spec.NodeName}, nil
	}})
	_ = inf.SetTransform(withoutManagedFields[storagev1.VolumeAttachment])
	return &Attachments{driver: driver, node: node, informer: inf}
}

// Run lists and watches VolumeAttachments until ctx ends, retrying what fails (the informer logs it).
func (a *Attachments) Run(ctx context.Context) { a.informer.RunWithContext(ctx) }

// List is the driver's VolumeAttachments on the node; synced is false while the cache has not been filled
// yet (the API server unreachable or the watch forbidden), when the list means nothing.
func (a *Attachments) List() (vas []*storagev1.VolumeAttachment, synced bool) {
	if !a.informer.HasSynced() {
		return nil, false
	}
	objs, err := a.informer.GetIndexer().ByIndex(byAttacherNode, a.driver+"/"+a.node)
	if err != nil {
		return nil, false
	}
	for _, o := range objs {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			vas = append(vas, va)
		}
	}
	return vas, true
}
