package cluster

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The commands Kubernetes' e2e suite sends to a node over SSH (test/e2e/storage/utils: KubeletCommand,
// isSudoPresent, getKubeletRunning, and the mount checks) are answered as a systemd host would: `systemctl
// stop|start|restart|kill|status|show|is-active kubelet`, with or without sudo, act on the node's kubelet through
// the node-control API; anything else is a shell command line run in the node's mount namespace.

// unitState is what systemd would say of the kubelet unit.
type unitState struct {
	// Active is systemd's ActiveState: active, inactive (stopped on request) or failed (exited by itself or
	// killed).
	Active string
	// Result is systemd's Result: success, signal or exit-code.
	Result string
	// MainPID is kubelet's process, 0 when it does not run.
	MainPID int
	// Since is when the unit entered its state.
	Since time.Time
}

func (s unitState) sub() string {
	switch s.Active {
	case "active":
		return "running"
	case "failed":
		return "failed"
	default:
		return "dead"
	}
}

// nodeHost is what an SSH session on a node acts on.
type nodeHost interface {
	// StopKubelet, StartKubelet and KillKubelet act as systemd does on the kubelet unit: stop waits for the
	// process to exit, start returns once it runs.
	StopKubelet(ctx context.Context) error
	StartKubelet(ctx context.Context) error
	KillKubelet(ctx context.Context, sig syscall.Signal) error
	KubeletState() unitState
	// Shell runs a command line with sh in the node's mount namespace and returns its exit status.
	Shell(ctx context.Context, cmdline string, stdout, stderr io.Writer) (int, error)
}

// sudoVersion is what `sudo --version` prints: the suite then prefixes its commands with sudo, which the node
// runs as root anyway.
const sudoVersion = "Sudo version 1.9.13p3\nSudoers policy plugin version 1.9.13p3\n"

// shellSpecial are the characters that make a command line more than plain words: such a line goes to sh.
const shellSpecial = "|&;<>()$`\\\"'*?[]{}~#\n\t"

// runNodeCommand answers one command line of an SSH session and returns its exit status.
func runNodeCommand(ctx context.Context, h nodeHost, cmdline string, stdout, stderr io.Writer) int {
	if !strings.ContainsAny(cmdline, shellSpecial) {
		words := strings.Fields(cmdline)
		words, version := stripSudo(words)
		if version {
			_, _ = io.WriteString(stdout, sudoVersion)
			return 0
		}
		if len(words) > 0 && (words[0] == "systemctl" || strings.HasSuffix(words[0], "/systemctl")) {
			return systemctl(ctx, h, words[1:], stdout, stderr)
		}
	}
	code, err := h.Shell(ctx, cmdline, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		if code == 0 {
			code = 255
		}
	}
	return code
}

// stripSudo removes a leading sudo and its options; version is true for `sudo --version` (or -V).
func stripSudo(words []string) (rest []string, version bool) {
	for len(words) > 0 && (words[0] == "sudo" || strings.HasSuffix(words[0], "/sudo")) {
		words = words[1:]
		for len(words) > 0 && strings.HasPrefix(words[0], "-") {
			switch words[0] {
			case "--version", "-V":
				return nil, true
			case "-u", "-g", "-C", "-h", "-p", "-U":
				if len(words) > 1 {
					words = words[1:]
				}
			case "--":
				words = words[1:]
				return words, false
			}
			words = words[1:]
		}
	}
	return words, false
}

// systemctlArgs are the parsed arguments of a systemctl command line.
type systemctlArgs struct {
	verb       string
	units      []string
	properties []string
	value      bool
	quiet      bool
	signal     syscall.Signal
}

func parseSystemctl(args []string) (systemctlArgs, error) {
	a := systemctlArgs{signal: syscall.SIGTERM}
	addProps := func(v string) {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				a.properties = append(a.properties, p)
			}
		}
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option '%s' requires an argument", arg)
			}
			i++
			return args[i], nil
		}
		name, val, hasVal := strings.Cut(arg, "=")
		switch {
		case !strings.HasPrefix(arg, "-"):
			if a.verb == "" {
				a.verb = arg
			} else {
				a.units = append(a.units, arg)
			}
		case name == "--property" || name == "-p" || name == "-P":
			if !hasVal {
				v, err := next()
				if err != nil {
					return a, err
				}
				val = v
			}
			addProps(val)
			if name == "-P" {
				a.value = true
			}
		case strings.HasPrefix(arg, "-p") && len(arg) > 2: // -pActiveState
			addProps(arg[2:])
		case arg == "--value":
			a.value = true
		case arg == "-q" || arg == "--quiet":
			a.quiet = true
		case name == "--signal" || name == "-s":
			if !hasVal {
				v, err := next()
				if err != nil {
					return a, err
				}
				val = v
			}
			sig, err := parseSignal(val)
			if err != nil {
				return a, err
			}
			a.signal = sig
		case slices.Contains([]string{"--no-pager", "--no-block", "--no-legend", "--no-ask-password", "--full", "-l",
			"--timestamp", "--kill-whom", "--kill-who", "--system"}, name):
			// Output and job options: the answer is the same.
		default:
			return a, fmt.Errorf("unrecognized option '%s'", arg)
		}
	}
	return a, nil
}

// parseSignal reads a signal as systemctl kill --signal does: a name (with or without SIG) or a number.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("failed to parse signal string %s", s)
}

// kubeletUnit is the unit the harness serves; any other is unknown, as on a host without it.
func kubeletUnit(name string) bool { return name == "kubelet" || name == "kubelet.service" }

func unitName(name string) string {
	if strings.Contains(name, ".") {
		return name
	}
	return name + ".service"
}

// systemctl answers a systemctl command (args without "systemctl") for the node's kubelet unit, with systemctl's
// exit statuses: 0, 1 on failure, 3 for a unit that is not active (status, is-active), 4 or 5 for unknown units.
func systemctl(ctx context.Context, h nodeHost, args []string, stdout, stderr io.Writer) int {
	a, err := parseSystemctl(args)
	if err != nil {
		fmt.Fprintf(stderr, "systemctl: %v\n", err)
		return 1
	}
	if a.verb == "" {
		fmt.Fprintln(stderr, "systemctl: this node serves only the kubelet unit's verbs (start, stop, restart, "+
			"try-restart, kill, status, show, is-active)")
		return 1
	}
	if len(a.units) == 0 {
		fmt.Fprintf(stderr, "Too few arguments.\n")
		return 1
	}
	switch a.verb {
	case "start", "stop", "restart", "try-restart", "kill":
		for _, u := range a.units {
			if !kubeletUnit(u) {
				verb := a.verb
				if verb == "try-restart" {
					verb = "restart"
				}
				fmt.Fprintf(stderr, "Failed to %s %s: Unit %s not found.\n", verb, unitName(u), unitName(u))
				return 5
			}
		}
		if err := kubeletAction(ctx, h, a); err != nil {
			fmt.Fprintf(stderr, "Job for kubelet.service failed: %v\n", err)
			return 1
		}
		return 0
	case "status":
		code := 0
		for i, u := range a.units {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if !kubeletUnit(u) {
				fmt.Fprintf(stderr, "Unit %s could not be found.\n", unitName(u))
				code = 4
				continue
			}
			st := h.KubeletState()
			writeStatus(stdout, st, time.Now())
			if st.Active != "active" && code == 0 {
				code = 3
			}
		}
		return code
	case "is-active":
		code := 0
		for _, u := range a.units {
			state := "inactive"
			if kubeletUnit(u) {
				state = h.KubeletState().Active
			}
			if !a.quiet {
				fmt.Fprintln(stdout, state)
			}
			if state != "active" {
				code = 3
			}
		}
		return code
	case "show":
		for i, u := range a.units {
			if i > 0 && !a.value {
				fmt.Fprintln(stdout)
			}
			writeShow(stdout, u, h.KubeletState(), a)
		}
		return 0
	default:
		fmt.Fprintf(stderr, "Unknown command verb %s.\n", a.verb)
		return 1
	}
}

func kubeletAction(ctx context.Context, h nodeHost, a systemctlArgs) error {
	switch a.verb {
	case "start":
		return h.StartKubelet(ctx)
	case "stop":
		return h.StopKubelet(ctx)
	case "restart":
		if err := h.StopKubelet(ctx); err != nil {
			return err
		}
		return h.StartKubelet(ctx)
	case "try-restart":
		if h.KubeletState().Active != "active" {
			return nil
		}
		if err := h.StopKubelet(ctx); err != nil {
			return err
		}
		return h.StartKubelet(ctx)
	case "kill":
		return h.KillKubelet(ctx, a.signal)
	}
	return fmt.Errorf("unknown verb %s", a.verb)
}

// systemdTime formats a time as systemd does (in UTC here).
func systemdTime(t time.Time) string { return t.UTC().Format("Mon 2006-01-02 15:04:05 MST") }

// systemdAgo is systemd's "1min 5s ago".
func systemdAgo(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Second {
		return "now"
	}
	var parts []string
	if h := d / time.Hour; h > 0 {
		parts = append(parts, fmt.Sprintf("%dh", h))
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		parts = append(parts, fmt.Sprintf("%dmin", m))
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 {
		parts = append(parts, fmt.Sprintf("%ds", s))
	}
	return strings.Join(parts, " ") + " ago"
}

// writeStatus writes `systemctl status kubelet` as systemd does: the Main PID line only while kubelet runs.
func writeStatus(w io.Writer, st unitState, now time.Time) {
	mark, active := "●", "active (running)"
	switch st.Active {
	case "failed":
		mark, active = "×", fmt.Sprintf("failed (Result: %s)", st.Result)
	case "inactive":
		mark, active = "○", "inactive (dead)"
	}
	fmt.Fprintf(w, "%s kubelet.service - kubelet: The Kubernetes Node Agent\n", mark)
	fmt.Fprintf(w, "     Loaded: loaded (/etc/systemd/system/kubelet.service; enabled; preset: enabled)\n")
	since := ""
	if !st.Since.IsZero() {
		since = fmt.Sprintf(" since %s; %s", systemdTime(st.Since), systemdAgo(now.Sub(st.Since)))
	}
	fmt.Fprintf(w, "     Active: %s%s\n", active, since)
	if st.Active == "active" && st.MainPID > 0 {
		fmt.Fprintf(w, "   Main PID: %d (kubelet)\n", st.MainPID)
	}
}

// writeShow writes `systemctl show` for one unit: the properties asked for (all of ours when none), as
// Name=value lines, or values alone with --value.
func writeShow(w io.Writer, unit string, st unitState, a systemctlArgs) {
	props := map[string]string{"Id": unitName(unit), "Names": unitName(unit), "LoadState": "not-found",
		"ActiveState": "inactive", "SubState": "dead", "MainPID": "0", "ExecMainPID": "0", "Result": "success",
		"Type": "simple", "ActiveEnterTimestamp": "", "InactiveEnterTimestamp": "", "StateChangeTimestamp": ""}
	order := []string{"Type", "Result", "MainPID", "ExecMainPID", "Id", "Names", "LoadState", "ActiveState",
		"SubState", "StateChangeTimestamp", "ActiveEnterTimestamp", "InactiveEnterTimestamp"}
	if kubeletUnit(unit) {
		props["LoadState"], props["ActiveState"], props["SubState"] = "loaded", st.Active, st.sub()
		props["MainPID"], props["ExecMainPID"] = strconv.Itoa(st.MainPID), strconv.Itoa(st.MainPID)
		props["Result"] = st.Result
		if !st.Since.IsZero() {
			props["StateChangeTimestamp"] = systemdTime(st.Since)
			if st.Active == "active" {
				props["ActiveEnterTimestamp"] = systemdTime(st.Since)
			} else {
				props["InactiveEnterTimestamp"] = systemdTime(st.Since)
			}
		}
	}
	names := a.properties
	if len(names) == 0 {
		names = order
	}
	for _, name := range names {
		v, ok := props[name]
		if !ok {
			continue // systemd prints nothing for a property the unit does not have
		}
		if a.value {
			fmt.Fprintln(w, v)
		} else {
			fmt.Fprintf(w, "%s=%s\n", name, v)
		}
	}
}
