package nodelife

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// withoutManagedFields is an informer transform: managed fields are most of an object's size and nothing here
// reads them. The cache keeps a shallow copy without them, because the object handed in may be shared with its
// source (a fake clientset's tracker's is), where writing to it would race.
func withoutManagedFields[T any, P interface {
	*T
	metav1.Object
}](obj any) (any, error) {
	p, ok := obj.(P)
	if !ok {
		return obj, nil
	}
	kept := *p
	P(&kept).SetManagedFields(nil)
	return P(&kept), nil
}
