// Package kubeclient makes the Kubernetes client both binaries use: from a kubeconfig file when one is named,
// else the pod's in-cluster configuration.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a client for kubeconfig, or for the cluster the process runs in when kubeconfig is "".
func New(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := Config(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Config is the client configuration New uses, for clients of other kinds (dynamic).
func Config(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cfg, nil
}
