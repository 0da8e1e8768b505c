package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// procs are the processes a benchmark started; stop ends them all (SIGTERM, then SIGKILL).
type procs struct {
	dir   string
	list  []*exec.Cmd
	names []string
}

// start runs bin with args, its output in dir/<name>.log.
func (p *procs) start(name, bin string, args []string, env ...string) error {
	cmd, err := p.launch(name, os.O_CREATE|os.O_TRUNC, bin, args, env)
	if err != nil {
		return err
	}
	p.list = append(p.list, cmd)
	p.names = append(p.names, name)
	return nil
}

// restart kills the process started as name with SIGKILL (no shutdown: as the OOM killer or a lost node
// would) and starts it again with the same command line, its output appended to the same log.
func (p *procs) restart(name string) error {
	i := slices.Index(p.names, name)
	if i < 0 {
		return fmt.Errorf("no process %s", name)
	}
	old := p.list[i]
	if err := old.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	_ = old.Wait()
	cmd, err := p.launch(name, os.O_APPEND, old.Path, old.Args[1:], old.Env[len(os.Environ()):])
	if err != nil {
		return err
	}
	p.list[i] = cmd
	return nil
}

// launch starts bin with args and the environment plus env, its output in dir/<name>.log opened with flag.
func (p *procs) launch(name string, flag int, bin string, args, env []string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(filepath.Join(p.dir, name+".log"), os.O_WRONLY|flag, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// A process group of its own: a ctrl-C at the terminal reaches only the benchmark, which then releases what
	// the run holds through these processes (unstage, detach, delete) before it stops them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

// cpu is the CPU time the process started as name has used so far: the sum of its threads' run times
// (/proc/PID/task/*/schedstat, in ns; /proc/PID/stat counts in 10 ms ticks, too coarse for a 0.3 s burst).
// Go's threads live as long as the process, so none of the time is lost with an exited thread.
func (p *procs) cpu(name string) (time.Duration, error) {
	i := slices.Index(p.names, name)
	if i < 0 {
		return 0, fmt.Errorf("no process %s", name)
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.list[i].Process.Pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("threads of %s: %v", name, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended between the listing and the read
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t, err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// pid is the process ID of the process started as name.
func (p *procs) pid(name string) (int, error) {
	i := slices.Index(p.names, name)
	if i < 0 {
		return 0, fmt.Errorf("no process %s", name)
	}
	return p.list[i].Process.Pid, nil
}

func (p *procs) stop() {
	for i := len(p.list) - 1; i >= 0; i-- {
		cmd := p.list[i]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	p.list, p.names = nil, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// poll calls ok until it reports true or 30 s pass; startup only, never inside a measurement.
func poll(ctx context.Context, what string, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not come up: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// startFakecloud starts the fakecloud binary on the file backend, without fsync, with the given extra flags.
func (p *procs) startFakecloud(ctx context.Context, bin string, args ...string) (string, error) {
	return p.startFakecloudWith(ctx, bin, append([]string{"--backend", "file", "--no-fsync"}, args...)...)
}

// startFakecloudWith starts the fakecloud binary with args and no other flag than its address and data
// directory (<dir>/fakecloud), and waits until it serves.
func (p *procs) startFakecloudWith(ctx context.Context, bin string, args ...string) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	url := "http://" + addr
	args = append([]string{"--listen", addr, "--data-dir", filepath.Join(p.dir, "fakecloud")}, args...)
	if err := p.start("fakecloud", bin, args); err != nil {
		return "", err
	}
	return url, poll(ctx, "fakecloud", func() bool {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// startDriver starts the driver binary on a unix socket in the benchmark's directory and connects to it.
func (p *procs) startDriver(ctx context.Context, bin string, args ...string) (*grpc.ClientConn, error) {
	sock := filepath.Join(p.dir, "csi.sock")
	args = append([]string{"--endpoint", "unix://" + sock}, args...)
	if err := p.start("driver", bin, args, "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench"); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ident := csi.NewIdentityClient(conn)
	err = poll(ctx, "driver", func() bool {
		resp, err := ident.Probe(ctx, &csi.ProbeRequest{})
		return err == nil && resp.GetReady().GetValue()
	})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// scrapeCalls reads diskforge_fakecloud_requests_total by action, by action and code ("Action/Code"), and in total;
// and the seconds fakecloud spent serving each action, under "seconds:Action".
func scrapeCalls(url string) (map[string]float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape fakecloud: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, `diskforge_fakecloud_request_duration_seconds_sum{action="`); ok {
			action, value, _ := strings.Cut(rest, `"} `)
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				out["seconds:"+action] += v
			}
			continue
		}
		rest, ok := strings.CutPrefix(line, "diskforge_fakecloud_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		var action, code string
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "action":
				action = strings.Trim(val, `"`)
			case "code":
				code = strings.Trim(val, `"`)
			}
		}
		out[action] += v
		out[action+"/"+code] += v
		out["total"] += v
	}
	return out, sc.Err()
}

// cpuOf is cpu of each of names.
func (p *procs) cpuOf(names []string) ([]time.Duration, error) {
	out := make([]time.Duration, len(names))
	for i, n := range names {
		var err error
		if out[i], err = p.cpu(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}
