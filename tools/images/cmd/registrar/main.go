// Command registrar registers a CSI driver's node plugin with the kubelet, as kubernetes-csi's
// node-driver-registrar does (that module is not served by the Go module proxy): it asks the driver its name,
// serves the kubelet's plugin registration API (pluginregistration/v1) on <plugin-registration-path>/<name>-reg.sock
// and answers with the driver's socket as the kubelet sees it. It takes the upstream flags, so the deploy
// manifests run it unchanged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func main() {
	klog.InitFlags(nil)
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the CSI driver's unix socket, as this container sees it")
	kubeletPath := flag.String("kubelet-registration-path", "", "the CSI driver's unix socket, as the kubelet sees it on the host")
	regDir := flag.String("plugin-registration-path", "/registration", "the kubelet's plugins_registry directory")
	endpoint := flag.String("http-endpoint", "", "address of the /healthz endpoint; empty: none")
	timeout := flag.Duration("timeout", time.Second, "timeout of one call to the driver")
	flag.Parse()
	if *kubeletPath == "" {
		klog.ErrorS(nil, "--kubelet-registration-path is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *csiAddress, *kubeletPath, *regDir, *endpoint, *timeout); err != nil {
		klog.ErrorS(err, "registrar")
		os.Exit(1)
	}
}

func run(ctx context.Context, csiAddress, kubeletPath, regDir, endpoint string, timeout time.Duration) error {
	name, err := driverName(ctx, csiAddress, timeout)
	if err != nil {
		return err
	}
	sock := filepath.Join(regDir, name+"-reg.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	defer os.Remove(sock)
	failed := make(chan error, 1)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{name: name, endpoint: kubeletPath, failed: failed})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	klog.InfoS("serving the plugin registration API", "socket", sock, "driver", name, "endpoint", kubeletPath)

	if endpoint != "" {
		mux := http.NewServeMux()
		// Healthy while the registration socket the kubelet dials is in place.
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if _, err := os.Stat(sock); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		hs := &http.Server{Addr: endpoint, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("serve /healthz: %w", err)
			}
		}()
		defer hs.Close()
	}
	select {
	case <-ctx.Done():
		klog.InfoS("stopping")
		return nil
	case err := <-failed:
		return err
	}
}

// driverName asks the driver its name, waiting for its socket to answer.
func driverName(ctx context.Context, csiAddress string, timeout time.Duration) (string, error) {
	conn, err := grpc.NewClient("unix://"+csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("CSI connection to %s: %w", csiAddress, err)
	}
	defer conn.Close()
	identity := csi.NewIdentityClient(conn)
	for {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		info, err := identity.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil && info.GetName() != "" {
			return info.GetName(), nil
		}
		klog.InfoS("waiting for the CSI driver", "address", csiAddress, "err", err)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// registration answers the kubelet's plugin watcher.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	failed         chan<- error
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus ends the registrar when the kubelet refuses the plugin, so that the container restarts
// and registers again, as upstream's does.
func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		err := fmt.Errorf("kubelet refused the plugin: %s", s.Error)
		select {
		case r.failed <- err:
		default:
		}
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	klog.InfoS("registered with the kubelet", "driver", r.name)
	return &registerapi.RegistrationStatusResponse{}, nil
}
