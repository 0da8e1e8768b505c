package cluster

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/diskforge/diskforge/internal/testutil"
)

// sshClient logs in as e2e.test does (test/e2e/framework/ssh): the private key read from KUBE_SSH_KEY_PATH's
// file, any host key.
func sshClient(t *testing.T, addr, user, keyFile string) (*ssh.Client, error) {
	t.Helper()
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", addr, &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey()})
}

// runSSH runs cmd in a new session and returns stdout, stderr and the exit status, as e2essh.SSH does.
func runSSH(t *testing.T, client *ssh.Client, cmd string) (string, string, int) {
	t.Helper()
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	code := 0
	if err := s.Run(cmd); err != nil {
		var exitErr *ssh.ExitError
		if !errors.As(err, &exitErr) {
			t.Fatalf("%q: %v", cmd, err)
		}
		code = exitErr.ExitStatus()
	}
	return stdout.String(), stderr.String(), code
}

func startTestSSH(t *testing.T, host nodeHost) (addr, keyFile string) {
	t.Helper()
	keys, err := newSSHKeys()
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err = keys.writeClientKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client key %s: %v, mode %v; want 0600", keyFile, err, fi.Mode())
	}
	srv := newSSHServer(t.Context(), keys, SSHUser, t.Logf)
	t.Cleanup(srv.close)
	a, err := srv.serve("127.0.0.1:0", "node-test", host)
	if err != nil {
		t.Fatal(err)
	}
	return a.String(), keyFile
}

func TestSSHServer(t *testing.T) {
	host := newFakeHost(t, true)
	addr, keyFile := startTestSSH(t, host)
	client, err := sshClient(t, addr, SSHUser, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	tests := []struct {
		cmd    string
		stdout string
		stderr string
		code   int
	}{
		{cmd: "sudo --version", stdout: sudoVersion},
		{cmd: "systemctl show kubelet --property ActiveState --value", stdout: "active\n"},
		{cmd: "sudo systemctl stop kubelet"},
		{cmd: "systemctl show kubelet --property ActiveState --value", stdout: "inactive\n"},
		{cmd: "sudo systemctl start kubelet"},
		{cmd: "systemctl is-active kubelet", stdout: "active\n"},
		{cmd: "printf 'x\\ny\\n' | grep y | grep -v z", stdout: "y\n"},
		{cmd: "echo oops >&2; exit 7", stderr: "oops\n", code: 7},
		{cmd: "echo x | grep nothing", code: 1},
		{cmd: "systemctl stop containerd", stderr: "Failed to stop containerd.service: Unit containerd.service not found.\n", code: 5},
	}
	for _, tt := range tests {
		stdout, stderr, code := runSSH(t, client, tt.cmd)
		if stdout != tt.stdout || stderr != tt.stderr || code != tt.code {
			t.Errorf("%q: stdout %q, stderr %q, exit %d; want %q, %q, %d", tt.cmd, stdout, stderr, code, tt.stdout,
				tt.stderr, tt.code)
		}
	}
	if got := strings.Join(host.calls, "|"); !strings.Contains(got, "stop|start") {
		t.Errorf("host calls %q: want the stop and the start", got)
	}
}

func TestSSHServerRefuses(t *testing.T) {
	addr, keyFile := startTestSSH(t, newFakeHost(t, true))
	if c, err := sshClient(t, addr, "admin", keyFile); err == nil {
		c.Close()
		t.Error("another user logged in")
	}
	_, otherKey := startTestSSH(t, newFakeHost(t, true)) // another run's key
	if c, err := sshClient(t, addr, SSHUser, otherKey); err == nil {
		c.Close()
		t.Error("another key logged in")
	}
	// No shell, no pty: only exec.
	client, err := sshClient(t, addr, SSHUser, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Shell(); err == nil {
		t.Error("an interactive shell was granted")
	}
}

// TestSSHServerCloseEndsCommands: closing the server ends a running command and its session.
func TestSSHServerCloseEndsCommands(t *testing.T) {
	keys, err := newSSHKeys()
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err := keys.writeClientKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := newSSHServer(t.Context(), keys, SSHUser, t.Logf)
	a, err := srv.serve("127.0.0.1:0", "node-test", newFakeHost(t, true))
	if err != nil {
		t.Fatal(err)
	}
	client, err := sshClient(t, a.String(), SSHUser, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("echo started; exec sleep 600"); err != nil {
		t.Fatal(err)
	}
	srv.close() // returns once the handlers are done: the sleep was killed
	if err := s.Wait(); err == nil {
		t.Error("the session ended well although the server closed")
	}
}

// TestNodeShell runs command lines through the node's shell as the SSH endpoint does: nsenter into a mount
// namespace (here the test's own), the harness's sudo shim on PATH.
func TestNodeShell(t *testing.T) {
	testutil.RequireRoot(t, "nsenter into a mount namespace")
	testutil.RequireTools(t, "nsenter")
	containerd := &proc{done: make(chan struct{})} // running
	h := &nodeSSH{n: &node{info: NodeInfo{Name: "node-test", Pid: os.Getpid()}, containerd: containerd},
		path: writeShims(t)}
	tests := []struct {
		cmd    string
		stdout string
		code   int
	}{
		{cmd: `sudo sh -c "ls / | grep -x proc"`, stdout: "proc\n"},
		{cmd: "sudo -n --version | head -1", stdout: "Sudo version 1.9.13p3\n"},
		{cmd: "cat /proc/self/mountinfo | grep -c ' / ' >/dev/null && echo mounts", stdout: "mounts\n"},
		{cmd: "systemctl stop kubelet && echo no", code: 1},
		{cmd: "kill -TERM $$", code: 128 + int(syscall.SIGTERM)},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code, err := h.Shell(t.Context(), tt.cmd, &stdout, &stderr)
		if err != nil || code != tt.code || stdout.String() != tt.stdout {
			t.Errorf("%q: %q, exit %d, %v (stderr %q); want %q, exit %d", tt.cmd, stdout.String(), code, err,
				stderr.String(), tt.stdout, tt.code)
		}
	}
	close(containerd.done)
	if _, err := h.Shell(t.Context(), "true", &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("a node whose containerd exited ran a command")
	}
}
