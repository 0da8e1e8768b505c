package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Services are the CSI services one process serves; Controller and Node may be nil.
type Services struct {
	Identity   csi.IdentityServer
	Controller csi.ControllerServer
	// GroupController may be nil; it is served only beside Controller.
	GroupController csi.GroupControllerServer
	Node            csi.NodeServer
}

// NewGRPCServer registers the services behind logging, metrics and panic recovery interceptors. reg may be nil.
func NewGRPCServer(s Services, reg prometheus.Registerer) *grpc.Server {
	m := newRPCMetrics(reg)
	// Recovery is innermost, so that logging and metrics see a panic as the Internal error it becomes.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(logRPC, boundErrors, m.observe, recoverPanic))
	csi.RegisterIdentityServer(srv, s.Identity)
	if s.Controller != nil {
		csi.RegisterControllerServer(srv, s.Controller)
		if s.GroupController != nil {
			csi.RegisterGroupControllerServer(srv, s.GroupController)
		}
	}
	if s.Node != nil {
		csi.RegisterNodeServer(srv, s.Node)
	}
	return srv
}

// logRPC logs every call with its secrets stripped, and every failure.
func logRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	klog.V(4).InfoS("RPC", "method", info.FullMethod, "request", cutStringer{protosanitizer.StripSecrets(req)})
	resp, err := handler(ctx, req)
	if err != nil {
		klog.ErrorS(err, "RPC failed", "method", info.FullMethod, "code", status.Code(err).String())
	} else {
		klog.V(5).InfoS("RPC done", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp))
	}
	return resp, err
}

// maxEcho bounds what an error message or a logged request repeats: a message names the input it refuses, and
// the input may be megabytes (a CSI name or path has no length limit on the wire). Sidecars copy messages into
// Kubernetes events, which keep about a kilobyte anyway.
const maxEcho = 1024

// boundErrors cuts the message of a failed call to maxEcho bytes, keeping its code and details.
func boundErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	st := status.Convert(err)
	if len(st.Message()) <= maxEcho {
		return resp, err
	}
	p := st.Proto()
	p.Message = cut(p.Message, maxEcho)
	return resp, status.FromProto(p).Err()
}

// cut shortens s to at most max bytes (on a rune boundary), saying how much was left out.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	// Room for the note with any count: "… [" 5 bytes, 20 digits, " bytes cut]" 11.
	end := max - 36
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + fmt.Sprintf("… [%d bytes cut]", len(s)-end)
}

// cutStringer formats a request for the log only when the log line is written, bounded like error messages.
type cutStringer struct{ s fmt.Stringer }

func (c cutStringer) String() string { return cut(c.s.String(), maxEcho) }

// recoverPanic turns a panic in a handler into Internal, with the stack in the log, so that one bad request
// cannot kill the plugin and every operation in flight with it. The handler's deferred releases (in-flight
// holds) have run by the time the panic reaches here.
func recoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("panic: %v", r), "RPC handler panicked", "method", info.FullMethod, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "internal error in %s: %v", info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

type rpcMetrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "diskforge_csi_rpc_requests_total",
			Help: "CSI RPCs served, by method and gRPC code."}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "diskforge_csi_rpc_duration_seconds",
			Help: "CSI RPC latency by method.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration)
	}
	return m
}

func (m *rpcMetrics) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.calls.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	return resp, err
}

// Listen opens a CSI endpoint: unix:///path, unix:/path, a bare path, or tcp://host:port. A stale unix socket
// left by a crashed process is removed first.
func Listen(endpoint string) (net.Listener, error) {
	network, addr, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, fmt.Errorf("create socket directory: %w", err)
		}
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
		}
	}
	return net.Listen(network, addr)
}

func parseEndpoint(endpoint string) (network, addr string, err error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		addr = u.Path
		if addr == "" {
			addr = u.Opaque
		}
		return "unix", addr, nil
	case "tcp":
		return "tcp", u.Host, nil
	case "":
		return "unix", endpoint, nil
	}
	return "", "", fmt.Errorf("endpoint %q: scheme must be unix or tcp", endpoint)
}

// Serve serves srv on lis until ctx ends, then stops gracefully, cutting calls still running after grace.
func Serve(ctx context.Context, srv *grpc.Server, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		srv.Stop()
	}
	return nil
}
