package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/diskforge/diskforge/internal/kubeclient"
	"github.com/diskforge/diskforge/internal/selftest"
)

// selftestCommand is `driver selftest`: the installed driver proved through the Kubernetes API (helm test).
const selftestCommand = "selftest"

func runSelftest(args []string) error {
	fs := flag.NewFlagSet(selftestCommand, flag.ContinueOnError)
	o := selftest.Options{Log: func(format string, a ...any) { fmt.Printf(format+"\n", a...) }}
	var kubeconfig, size, expanded string
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster)")
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the test's claims, pods and snapshot")
	fs.StringVar(&o.StorageClass, "storage-class", "diskforge-ext4", "StorageClass of the claims")
	fs.StringVar(&o.SnapshotClass, "snapshot-class", "diskforge-snapshots", "VolumeSnapshotClass of the snapshot")
	fs.StringVar(&o.Image, "image", "", "image of the pods that write and read (sh, cat, df, awk): the driver's")
	fs.StringVar(&size, "size", "1Gi", "size of the claim")
	fs.StringVar(&expanded, "expanded-size", "2Gi", "size the claim is expanded to")
	fs.StringVar(&o.Prefix, "prefix", "diskforge-selftest", "prefix of the objects' names")
	fs.DurationVar(&o.StepTimeout, "step-timeout", 3*time.Minute, "time each step may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.Size, err = resource.ParseQuantity(size); err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	if o.ExpandedSize, err = resource.ParseQuantity(expanded); err != nil {
		return fmt.Errorf("--expanded-size: %w", err)
	}
	if o.ExpandedSize.Cmp(o.Size) <= 0 {
		return fmt.Errorf("--expanded-size %s must be above --size %s", expanded, size)
	}
	if o.Namespace == "" || o.Image == "" {
		return fmt.Errorf("--namespace and --image are needed")
	}
	cfg, err := kubeclient.Config(kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := selftest.Run(ctx, kube, dyn, o); err != nil {
		return err
	}
	fmt.Println("selftest passed")
	return nil
}
