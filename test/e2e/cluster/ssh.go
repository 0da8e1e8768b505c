package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
)

// SSHUser is the user the nodes' SSH endpoints accept (KUBE_SSH_USER): commands run as root, with or without sudo.
const SSHUser = "root"

// SSHInfo is how Kubernetes' e2e suite reaches the nodes: <node address>:22 with this key (its e2essh reads
// KUBE_SSH_KEY_PATH and KUBE_SSH_USER, whatever the provider).
type SSHInfo struct {
	// KeyFile is the private key (OpenSSH format), generated for the run.
	KeyFile string
	// User is the user name to log in with.
	User string
}

// Env is the environment e2e.test needs to reach the nodes over SSH.
func (s SSHInfo) Env() []string {
	if s.KeyFile == "" {
		return nil
	}
	return []string{"KUBE_SSH_KEY_PATH=" + s.KeyFile, "KUBE_SSH_USER=" + s.User}
}

// sshServer serves SSH sessions on the nodes' addresses: one listener per node, whose exec requests act on that
// node (runNodeCommand). Only the run's key and user may log in; there is no interactive shell.
type sshServer struct {
	config *ssh.ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	logf   func(string, ...any)

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// sshKeys are a run's keys: the host key, and the client key whose private half e2e.test reads.
type sshKeys struct {
	host       ssh.Signer
	client     ssh.PublicKey
	privatePEM []byte
}

func newSSHKeys() (*sshKeys, error) {
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	host, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return nil, err
	}
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "diskforge e2e")
	if err != nil {
		return nil, err
	}
	pub, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		return nil, err
	}
	return &sshKeys{host: host, client: pub, privatePEM: pem.EncodeToMemory(block)}, nil
}

// writeClientKey writes the private key (0600) and the public key beside it, and returns the private key's path.
func (k *sshKeys) writeClientKey(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	file := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(file, k.privatePEM, 0o600); err != nil {
		return "", err
	}
	return file, os.WriteFile(file+".pub", ssh.MarshalAuthorizedKey(k.client), 0o644)
}

func newSSHServer(ctx context.Context, keys *sshKeys, user string, logf func(string, ...any)) *sshServer {
	authorized := keys.client.Marshal()
	config := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() == user && bytes.Equal(key.Marshal(), authorized) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("key or user %q not authorized", meta.User())
		},
	}
	config.AddHostKey(keys.host)
	ctx, cancel := context.WithCancel(ctx)
	return &sshServer{config: config, ctx: ctx, cancel: cancel, logf: logf, conns: map[net.Conn]struct{}{}}
}

// serve listens on addr for the sessions of host; name is the node's, for the logs.
func (s *sshServer) serve(addr, name string, host nodeHost) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed
			}
			if !s.track(conn) {
				_ = conn.Close()
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.untrack(conn)
				s.handleConn(conn, name, host)
			}()
		}
	}()
	return l.Addr(), nil
}

func (s *sshServer) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *sshServer) untrack(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
	_ = conn.Close()
}

// close stops accepting, cancels the running commands (their process groups are killed), closes every
// connection and waits for the handlers.
func (s *sshServer) close() {
	s.cancel()
	s.mu.Lock()
	for _, l := range s.listeners {
		_ = l.Close()
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *sshServer) handleConn(conn net.Conn, name string, host nodeHost) {
	sconn, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.logf("ssh %s: handshake from %s: %v", name, conn.RemoteAddr(), err)
		}
		return
	}
	defer sconn.Close()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.session(ch, chReqs, name, host)
		}()
	}
}

// session answers one exec request (env requests are accepted and ignored; there is no pty or shell), sends its
// exit status and closes the channel.
func (s *sshServer) session(ch ssh.Channel, reqs <-chan *ssh.Request, name string, host nodeHost) {
	defer ch.Close()
	for req := range reqs {
		switch req.Type {
		case "env":
			_ = req.Reply(true, nil)
		case "exec":
			var payload struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			go ssh.DiscardRequests(reqs)
			code := runNodeCommand(s.ctx, host, payload.Command, ch, ch.Stderr())
			s.logf("ssh %s: %q: exit %d", name, payload.Command, code)
			_ = ch.CloseWrite()
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}
