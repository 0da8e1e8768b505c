package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeHost is a node whose kubelet is a state machine and whose shell is the test's own sh (no namespace) with
// the harness's shims on PATH.
type fakeHost struct {
	mu       sync.Mutex
	state    unitState
	calls    []string
	startErr error
	path     string
}

// writeShims writes the node shell's shims into a directory of the test and returns a PATH with them first.
func writeShims(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, script := range shims {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

func newFakeHost(t *testing.T, running bool) *fakeHost {
	h := &fakeHost{state: unitState{Active: "inactive", Result: "success"}, path: writeShims(t)}
	if running {
		h.state = unitState{Active: "active", Result: "success", MainPID: 1234, Since: time.Now().Add(-65 * time.Second)}
	}
	return h
}

func (h *fakeHost) record(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *fakeHost) StopKubelet(context.Context) error {
	h.record("stop")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = unitState{Active: "inactive", Result: "success", Since: time.Now()}
	return nil
}

func (h *fakeHost) StartKubelet(context.Context) error {
	h.record("start")
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.startErr != nil {
		return h.startErr
	}
	h.state = unitState{Active: "active", Result: "success", MainPID: 4321, Since: time.Now()}
	return nil
}

func (h *fakeHost) KillKubelet(_ context.Context, sig syscall.Signal) error {
	h.record("kill " + unixSignalName(sig))
	h.mu.Lock()
	defer h.mu.Unlock()
	if sig == syscall.SIGKILL {
		h.state = unitState{Active: "failed", Result: "signal", Since: time.Now()}
	}
	return nil
}

func unixSignalName(sig syscall.Signal) string { return fmt.Sprintf("%d", int(sig)) }

func (h *fakeHost) KubeletState() unitState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

func (h *fakeHost) Shell(ctx context.Context, cmdline string, stdout, stderr io.Writer) (int, error) {
	h.record("shell " + cmdline)
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", cmdline)
	cmd.Env = []string{"PATH=" + h.path}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 255, err
	}
	return 0, nil
}

func TestRunNodeCommand(t *testing.T) {
	tests := []struct {
		name      string
		running   bool
		startErr  error
		cmd       string
		code      int
		stdout    string   // exact, unless contains is set
		contains  []string // substrings of stdout
		absent    []string // not in stdout
		stderr    string   // substring
		calls     []string
		endActive string // the unit's state afterwards
	}{
		{name: "sudo present", cmd: "sudo --version", contains: []string{"Sudo version"}},
		{name: "stop", running: true, cmd: "systemctl stop kubelet", calls: []string{"stop"}, endActive: "inactive"},
		{name: "stop with sudo", running: true, cmd: "sudo systemctl stop kubelet", calls: []string{"stop"}, endActive: "inactive"},
		{name: "start", cmd: "sudo systemctl start kubelet", calls: []string{"start"}, endActive: "active"},
		{name: "restart", running: true, cmd: "sudo -n systemctl restart kubelet.service", calls: []string{"stop", "start"},
			endActive: "active"},
		{name: "try-restart of a stopped unit does nothing", cmd: "systemctl try-restart kubelet", endActive: "inactive"},
		{name: "start fails", startErr: errors.New("containerd exited"), cmd: "systemctl start kubelet", code: 1,
			stderr: "containerd exited", calls: []string{"start"}},
		{name: "kill", running: true, cmd: "systemctl kill -s SIGKILL kubelet", calls: []string{"kill 9"}, endActive: "failed"},
		{name: "kill by number", running: true, cmd: "systemctl kill --signal=15 kubelet", calls: []string{"kill 15"}},
		{name: "show value", running: true, cmd: "systemctl show kubelet --property ActiveState --value", stdout: "active\n"},
		{name: "show value stopped", cmd: "systemctl show kubelet --property ActiveState --value", stdout: "inactive\n"},
		{name: "show properties", running: true, cmd: "systemctl show kubelet -p MainPID,SubState", stdout: "MainPID=1234\nSubState=running\n"},
		{name: "show -P", running: true, cmd: "systemctl show -P MainPID kubelet", stdout: "1234\n"},
		{name: "show unknown unit", cmd: "systemctl show docker --property LoadState --value", stdout: "not-found\n"},
		{name: "status running", running: true, cmd: "systemctl status kubelet",
			contains: []string{"Main PID: 1234 (kubelet)", "Active: active (running) since ", "; 1min 5s ago", "● kubelet.service"}},
		{name: "status stopped", cmd: "sudo systemctl status kubelet --no-pager", code: 3,
			contains: []string{"Active: inactive (dead)"}, absent: []string{"Main PID"}},
		{name: "is-active", running: true, cmd: "systemctl is-active kubelet", stdout: "active\n"},
		{name: "is-active stopped", cmd: "systemctl is-active kubelet", code: 3, stdout: "inactive\n"},
		{name: "is-active quiet", cmd: "systemctl is-active -q kubelet", code: 3, stdout: ""},
		{name: "unknown unit", running: true, cmd: "systemctl stop docker", code: 5, stderr: "Unit docker.service not found"},
		{name: "status of an unknown unit", cmd: "systemctl status docker", code: 4, stderr: "could not be found"},
		{name: "unknown verb", cmd: "systemctl frobnicate kubelet", code: 1, stderr: "Unknown command verb frobnicate"},
		{name: "unknown option", cmd: "systemctl --bogus stop kubelet", code: 1, stderr: "unrecognized option '--bogus'"},
		{name: "no unit", cmd: "systemctl stop", code: 1, stderr: "Too few arguments"},
		{name: "bad signal", cmd: "systemctl kill -s SIGFOO kubelet", code: 1, stderr: "failed to parse signal"},
		{name: "pipeline goes to the shell", cmd: "printf 'a uid-1\\nb uid-2\\n' | grep uid-2 | grep -v subpaths",
			stdout: "b uid-2\n", calls: []string{"shell printf 'a uid-1\\nb uid-2\\n' | grep uid-2 | grep -v subpaths"}},
		{name: "grep without a match", cmd: "echo x | grep y", code: 1, stdout: ""},
		{name: "sudo sh -c goes to the shell whole", cmd: `sudo sh -c "echo hi"`, stdout: "hi\n",
			calls: []string{`shell sudo sh -c "echo hi"`}},
		{name: "plain command", cmd: "echo plain", stdout: "plain\n", calls: []string{"shell echo plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHost(t, tt.running)
			h.startErr = tt.startErr
			var stdout, stderr bytes.Buffer
			code := runNodeCommand(t.Context(), h, tt.cmd, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tt.code, stdout.String(), stderr.String())
			}
			if tt.contains == nil && stdout.String() != tt.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.stdout)
			}
			for _, s := range tt.contains {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout %q lacks %q", stdout.String(), s)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(stdout.String(), s) {
					t.Errorf("stdout %q has %q", stdout.String(), s)
				}
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.stderr)
			}
			if tt.calls != nil && strings.Join(h.calls, "|") != strings.Join(tt.calls, "|") {
				t.Errorf("calls %q, want %q", h.calls, tt.calls)
			}
			if tt.endActive != "" && h.KubeletState().Active != tt.endActive {
				t.Errorf("unit %s afterwards, want %s", h.KubeletState().Active, tt.endActive)
			}
		})
	}
}

func TestStripSudo(t *testing.T) {
	tests := []struct {
		in      string
		rest    string
		version bool
	}{
		{in: "sudo systemctl stop kubelet", rest: "systemctl stop kubelet"},
		{in: "sudo -n -E systemctl stop kubelet", rest: "systemctl stop kubelet"},
		{in: "sudo -u root systemctl stop kubelet", rest: "systemctl stop kubelet"},
		{in: "sudo -- systemctl stop kubelet", rest: "systemctl stop kubelet"},
		{in: "/usr/bin/sudo sudo systemctl status kubelet", rest: "systemctl status kubelet"},
		{in: "sudo -V", version: true},
		{in: "systemctl stop kubelet", rest: "systemctl stop kubelet"},
	}
	for _, tt := range tests {
		rest, version := stripSudo(strings.Fields(tt.in))
		if strings.Join(rest, " ") != tt.rest || version != tt.version {
			t.Errorf("stripSudo(%q) = %q, %t; want %q, %t", tt.in, rest, version, tt.rest, tt.version)
		}
	}
}

func TestSystemdAgo(t *testing.T) {
	tests := map[time.Duration]string{
		0:                                 "now",
		42 * time.Second:                  "42s ago",
		65 * time.Second:                  "1min 5s ago",
		2*time.Hour + 3*time.Minute:       "2h 3min ago",
		time.Hour + 1500*time.Millisecond: "1h 2s ago",
	}
	for d, want := range tests {
		if got := systemdAgo(d); got != want {
			t.Errorf("systemdAgo(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestParseTaskList(t *testing.T) {
	out := "TASK                                                                PID      STATUS    \n" +
		"0a1b    4242    RUNNING\n" +
		"0c2d    0       STOPPED\n" +
		"0e3f    4343    PAUSED\n" +
		"\n"
	got := parseTaskList(out)
	if strings.Join(got, ",") != "0a1b,0e3f" {
		t.Errorf("parseTaskList = %q, want the tasks not stopped (0a1b, 0e3f)", got)
	}
}

func TestKubeletState(t *testing.T) {
	n := &node{}
	if st := n.kubeletState(); st.Active != "inactive" {
		t.Errorf("no kubelet yet: %s, want inactive", st.Active)
	}
	run := func(script string) *proc {
		cmd := exec.Command("/bin/sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
		go func() {
			_ = cmd.Wait()
			p.ended = time.Now()
			close(p.done)
		}()
		return p
	}
	n.kubelet = run("exec sleep 60")
	st := n.kubeletState()
	if st.Active != "active" || st.MainPID != n.kubelet.cmd.Process.Pid {
		t.Errorf("running: %+v, want active with its pid", st)
	}
	_ = n.kubelet.cmd.Process.Kill()
	<-n.kubelet.done
	if st := n.kubeletState(); st.Active != "failed" || st.Result != "signal" || st.MainPID != 0 {
		t.Errorf("killed: %+v, want failed by a signal", st)
	}
	n.kubelet = run("exit 2")
	<-n.kubelet.done
	if st := n.kubeletState(); st.Active != "failed" || st.Result != "exit-code" {
		t.Errorf("exited 2: %+v, want failed with exit-code", st)
	}
	n.kubeletStopped = true
	if st := n.kubeletState(); st.Active != "inactive" {
		t.Errorf("stopped on request: %+v, want inactive", st)
	}
}
