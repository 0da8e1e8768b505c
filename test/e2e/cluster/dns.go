package cluster

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// clusterDomain is the kubelets' cluster domain.
const clusterDomain = "cluster.local"

// dnsServer answers pods' A queries for <service>.<namespace>.svc.cluster.local, as CoreDNS does for a headless
// Service: with the addresses of the Service's ready endpoints (there is no kube-proxy to route a ClusterIP),
// but for the kubernetes Service, whose ClusterIP the API server itself listens on. Other names do not exist.
type dnsServer struct {
	client kubernetes.Interface
	conn   net.PacketConn
	logf   func(string, ...any)
}

func startDNS(ctx context.Context, client kubernetes.Interface, addr string, logf func(string, ...any)) (*dnsServer, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &dnsServer{client: client, conn: conn, logf: logf}
	go s.serve(ctx)
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()
	return s, nil
}

func (s *dnsServer) serve(ctx context.Context) {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			if resp := s.answer(ctx, q); resp != nil {
				_, _ = s.conn.WriteTo(resp, from)
			}
		}()
	}
}

// answer builds the reply to one query; nil drops a message that is not a query.
func (s *dnsServer) answer(ctx context.Context, msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	var addrs []netip.Addr
	exists := false
	if q.Class == dnsmessage.ClassINET {
		addrs, exists = s.lookup(ctx, strings.TrimSuffix(strings.ToLower(q.Name.String()), "."))
	}
	if !exists {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if err := b.Question(q); err != nil {
		return nil
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	if q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// lookup resolves <service>.<namespace>.svc.cluster.local; exists is false for any other name.
func (s *dnsServer) lookup(ctx context.Context, name string) (addrs []netip.Addr, exists bool) {
	rest, ok := strings.CutSuffix(name, ".svc."+clusterDomain)
	if !ok {
		return nil, false
	}
	svcName, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	svc, err := s.client.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	if ns == metav1.NamespaceDefault && svcName == "kubernetes" {
		a, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return nil, true
		}
		return []netip.Addr{a}, true
	}
	slices, err := s.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "kubernetes.io/service-name=" + svcName})
	if err != nil {
		return nil, true
	}
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	return addrs, true
}
