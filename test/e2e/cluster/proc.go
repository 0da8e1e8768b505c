package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
}

// procRole orders the teardown: controllers and kubelets stop before the pods are removed.
type procRole int

const (
	roleOther procRole = iota
	roleController
	roleKubelet
)

// start runs bin with args; the process gets its own process group, so stopping it stops its children too.
func (c *Cluster) start(name, bin string, args []string, env ...string) (*proc, error) {
	logPath := filepath.Join(c.info.WorkDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
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
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
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
