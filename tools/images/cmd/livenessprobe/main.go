// Command livenessprobe serves /healthz for a CSI driver: each request calls the driver's Probe over its socket
// and answers 200 when the driver is ready, 500 otherwise. It takes the flags of kubernetes-csi's livenessprobe
// (not served by the Go module proxy), so the deploy manifests run it unchanged.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

func main() {
	klog.InitFlags(nil)
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the CSI driver's unix socket")
	timeout := flag.Duration("probe-timeout", time.Second, "how long one Probe may take")
	endpoint := flag.String("http-endpoint", ":9808", "address of the /healthz endpoint")
	flag.Parse()

	conn, err := grpc.NewClient("unix://"+*csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		klog.ErrorS(err, "CSI connection", "address", *csiAddress)
		os.Exit(1)
	}
	defer conn.Close()
	identity := csi.NewIdentityClient(conn)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), *timeout)
		defer cancel()
		if err := probe(ctx, identity); err != nil {
			klog.ErrorS(err, "health check failed")
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	klog.InfoS("serving /healthz", "address", *endpoint, "csiAddress", *csiAddress)
	srv := &http.Server{Addr: *endpoint, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		klog.ErrorS(err, "serve /healthz")
		os.Exit(1)
	}
}

func probe(ctx context.Context, identity csi.IdentityClient) error {
	resp, err := identity.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return fmt.Errorf("driver is not ready")
	}
	return nil
}
