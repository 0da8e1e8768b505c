package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registrar tells a kubelet where the driver's node plugin listens, as node-driver-registrar does (that
// sidecar is not served by the module proxy, so the harness plays its part).
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
	logf     func(string, ...any)
	node     string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: DriverName, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.logf("node %s: kubelet refused the driver: %s", r.node, s.Error)
	} else {
		r.logf("node %s: driver registered with kubelet", r.node)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// startRegistrar serves the registration socket in the kubelet's plugins_registry until the cluster stops.
func (c *Cluster) startRegistrar(ctx context.Context, n NodeInfo, endpoint string) error {
	dir := filepath.Join(n.RootDir, "plugins_registry")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	sock := filepath.Join(dir, DriverName+"-reg.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registrar{endpoint: endpoint, logf: c.logf, node: n.Name})
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	return nil
}
