package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is a process the harness started, with its output in a log file of the work dir.
type proc struct {
	role procRole
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	// started and ended (set before done closes) date the process, for systemctl's answers.
	started, ended time.Time
}

// procRole orders the teardown: controllers and kubelets stop before the pods are removed.
type procRole int

const (
	roleOther procRole = iota
	roleController
	roleKubelet
)

// errStopped refuses to start a process once the cluster's teardown has begun.
var errStopped = errors.New("the cluster is stopped")

// start runs bin with args; the process gets its own process group, so stopping it stops its children too. A
// process started again under the same name (a restarted kubelet) appends to the same log. It fails once Stop has
// begun, so that nothing started concurrently outlives the teardown.
func (c *Cluster) start(name, bin string, args []string, env ...string) (*proc, error) {
	return c.startRole(roleOther, name, bin, args, env...)
}

// startRole is start with the process's teardown role set before any teardown can see it.
func (c *Cluster) startRole(role procRole, name, bin string, args []string, env ...string) (*proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, errStopped
	}
	logPath := filepath.Join(c.info.WorkDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	// Each process works in a directory of its own in the work dir: kubelet's log cleanup removes files
	// relative to its working directory when the fake runtime reports no log path.
	cwd := filepath.Join(c.info.WorkDir, "cwd", name)
	if err := os.MkdirAll(cwd, 0o750); err != nil {
		_ = f.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = cwd
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{role: role, name: name, cmd: cmd, log: logPath, done: make(chan struct{}), started: time.Now()}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		p.ended = time.Now()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	c.logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail() string {
	raw, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(raw) > 3000 {
		raw = raw[len(raw)-3000:]
	}
	return string(raw)
}
