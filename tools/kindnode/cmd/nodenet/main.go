// Command nodenet keeps a kind node's pod network (package nodenet): every few seconds it lists the Nodes,
// writes this node's CNI configuration once its pod CIDR is known, and makes the routes to the other nodes'
// pods exactly those of the plan (routes it made are marked with their own protocol number, so it removes its
// own stale ones and touches no other route). It runs as a DaemonSet with the host's network.
//
// Environment: NODE_NAME (this node), CONTROL_PLANE_ENDPOINT (host:port of the API server, which kind adds;
// else the in-cluster Service address), and the service account's token and CA at their usual paths.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/diskforge/diskforge/tools/kindnode/nodenet"
)

const (
	saDir      = "/var/run/secrets/kubernetes.io/serviceaccount"
	cniFile    = "/etc/cni/net.d/10-nodenet.conflist"
	period     = 5 * time.Second
	routeProto = netlink.RouteProtocol(99) // marks nodenet's routes (see /etc/iproute2/rt_protos: unassigned)
)

func main() {
	self := os.Getenv("NODE_NAME")
	if self == "" {
		log.Fatal("NODE_NAME is not set")
	}
	server, err := apiServer()
	if err != nil {
		log.Fatal(err)
	}
	client, err := apiClient()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("nodenet on %s, API server %s", self, server)
	var last string
	for {
		if err := sync(ctx, client, server, self, &last); err != nil {
			log.Printf("sync: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// apiServer is the API server's base URL.
func apiServer() (string, error) {
	if ep := os.Getenv("CONTROL_PLANE_ENDPOINT"); ep != "" {
		return "https://" + ep, nil
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", errors.New("neither CONTROL_PLANE_ENDPOINT nor KUBERNETES_SERVICE_HOST/PORT is set")
	}
	return "https://" + net.JoinHostPort(host, port), nil
}

// apiClient trusts the cluster's CA from the service account.
func apiClient() (*http.Client, error) {
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in the service account's ca.crt")
	}
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// sync lists the nodes and brings the CNI configuration and the routes to the plan; last is the plan already
// logged, so that only changes are.
func sync(ctx context.Context, client *http.Client, server, self string, last *string) error {
	raw, err := listNodes(ctx, client, server)
	if err != nil {
		return err
	}
	nodes, err := nodenet.ParseNodeList(raw)
	if err != nil {
		return err
	}
	plan, err := nodenet.PlanFor(self, nodes)
	if err != nil {
		return err
	}
	if s := fmt.Sprint(plan); s != *last {
		log.Printf("plan: pod CIDR %q, routes %v", plan.PodCIDR, plan.Routes)
		*last = s
	}
	if plan.PodCIDR != "" {
		if err := writeConflist(plan.PodCIDR); err != nil {
			return err
		}
	}
	return applyRoutes(plan.Routes)
}

func listNodes(ctx context.Context, client *http.Client, server string) ([]byte, error) {
	// The token is read on every request: a projected token is rotated in place.
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/api/v1/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list nodes: %s: %.200s", resp.Status, body)
	}
	return body, nil
}

// writeConflist writes the CNI configuration when it differs, through a rename: the runtime never reads half.
func writeConflist(podCIDR string) error {
	conf, err := nodenet.Conflist(podCIDR)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(cniFile); err == nil && bytes.Equal(old, conf) {
		return nil
	}
	tmp := cniFile + ".tmp"
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, cniFile); err != nil {
		return err
	}
	log.Printf("wrote %s for %s", cniFile, podCIDR)
	return nil
}

// applyRoutes makes nodenet's routes exactly routes: replaces each (a node's address may change), removes the
// ones of nodes that are gone.
func applyRoutes(routes []nodenet.Route) error {
	want := map[string]bool{}
	var errs []error
	for _, r := range routes {
		want[r.Dst.String()] = true
		err := netlink.RouteReplace(&netlink.Route{Dst: r.Dst, Gw: r.Via, Protocol: routeProto})
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r, err))
		}
	}
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routeProto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, r := range have {
		if r.Dst != nil && !want[r.Dst.String()] {
			if err := netlink.RouteDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("remove route %s: %w", r.Dst, err))
			} else {
				log.Printf("removed route %s via %s", r.Dst, r.Gw)
			}
		}
	}
	return errors.Join(errs...)
}
