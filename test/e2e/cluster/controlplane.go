package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// startControlPlane runs etcd, the API server (TLS, RBAC and the Node authorizer on, service-account keys from
// the harness's PKI), the controller manager and the scheduler.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	var err error
	if c.pki, err = newPKI(filepath.Join(c.info.WorkDir, "pki")); err != nil {
		return err
	}
	etcdClient, err := freeAddr()
	if err != nil {
		return err
	}
	etcdPeer, err := freeAddr()
	if err != nil {
		return err
	}
	etcd, err := c.start("etcd", c.bin("etcd"), []string{
		"--name=e2e", "--data-dir=" + filepath.Join(c.info.WorkDir, "etcd"),
		"--listen-client-urls=http://" + etcdClient, "--advertise-client-urls=http://" + etcdClient,
		"--listen-peer-urls=http://" + etcdPeer, "--initial-advertise-peer-urls=http://" + etcdPeer,
		"--initial-cluster=e2e=http://" + etcdPeer, "--unsafe-no-fsync", "--log-level=warn",
	})
	if err != nil {
		return err
	}
	if err := poll(ctx, time.Minute, "etcd", func(context.Context) (bool, error) {
		if etcd.exited() {
			return false, fmt.Errorf("etcd exited: %s", etcd.tail())
		}
		resp, err := http.Get("http://" + etcdClient + "/health")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200, nil
	}); err != nil {
		return err
	}

	// The API server listens on the kubernetes Service's ClusterIP itself (an address of the host's dummy
	// interface), where pods reach it without kube-proxy.
	c.server = "https://" + net.JoinHostPort(apiServiceIP, strconv.Itoa(apiPort))
	servingCert, servingKey, err := c.pki.issue("kube-apiserver", nil, apiServiceIP, "127.0.0.1", "localhost", "kubernetes",
		"kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc."+clusterDomain)
	if err != nil {
		return err
	}
	adminCert, adminKey, err := c.pki.issue("e2e-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	c.info.Kubeconfig = filepath.Join(c.info.WorkDir, "admin.kubeconfig")
	if err := writeKubeconfig(c.info.Kubeconfig, c.server, c.pki.CAFile, adminCert, adminKey, ""); err != nil {
		return err
	}
	apiserver, err := c.start("kube-apiserver", c.bin("kube-apiserver"), []string{
		"--etcd-servers=http://" + etcdClient,
		"--bind-address=" + apiServiceIP, "--advertise-address=" + apiServiceIP, "--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + servingCert, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + c.pki.CAFile,
		"--service-account-key-file=" + c.pki.SAPubFile, "--service-account-signing-key-file=" + c.pki.SAKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP",
		"--service-cluster-ip-range=" + serviceRange, "--allow-privileged=true",
		"--cert-dir=" + filepath.Join(c.info.WorkDir, "apiserver-certs"), "--v=1",
	})
	if err != nil {
		return err
	}
	client, err := c.adminClient()
	if err != nil {
		return err
	}
	c.client = client
	if err := poll(ctx, 2*time.Minute, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		if apiserver.exited() {
			return false, fmt.Errorf("kube-apiserver exited: %s", apiserver.tail())
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	}); err != nil {
		return err
	}

	kcm := []string{"--kubeconfig=" + c.info.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file=" + c.pki.SAKeyFile, "--root-ca-file=" + c.pki.CAFile,
		"--use-service-account-credentials=false", "--controllers=*", "--v=1"}
	p, err := c.start("kube-controller-manager", c.bin("kube-controller-manager"), kcm)
	if err != nil {
		return err
	}
	p.role = roleController
	if p, err = c.start("kube-scheduler", c.bin("kube-scheduler"), []string{"--kubeconfig=" + c.info.Kubeconfig,
		"--authentication-kubeconfig=" + c.info.Kubeconfig, "--authorization-kubeconfig=" + c.info.Kubeconfig,
		"--leader-elect=false", "--secure-port=0", "--v=1"}); err != nil {
		return err
	}
	p.role = roleController
	if err := c.labelControlPlaneLater(ctx); err != nil {
		return err
	}
	_, err = startDNS(ctx, c.client, net.JoinHostPort(dnsServiceIP, "53"), c.logf)
	return err
}

// labelControlPlaneLater labels the first node as the control plane as soon as it registers.
func (c *Cluster) labelControlPlaneLater(ctx context.Context) error {
	go func() {
		_ = poll(ctx, 5*time.Minute, "control-plane label", func(ctx context.Context) (bool, error) {
			return c.labelControlPlane(ctx) == nil, nil
		})
	}()
	return nil
}
