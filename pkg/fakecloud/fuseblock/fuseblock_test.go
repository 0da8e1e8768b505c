package fuseblock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestPolicyVerdicts: what a policy returns is what the device sees.
func TestPolicyVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"let through", nil, 0},
		{"errno as is", syscall.EROFS, syscall.EROFS},
		{"wrapped errno", fmt.Errorf("volume full: %w", syscall.ENOSPC), syscall.ENOSPC},
		{"any other error", errors.New("injected"), syscall.EIO},
		{"context ended", context.Canceled, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got IO
			f := &FS{ctx: context.Background(), policy: PolicyFunc(func(_ context.Context, io IO) error {
				got = io
				return tc.err
			})}
			if errno := f.before("vol-a", OpWrite, 4096, 512); errno != tc.want {
				t.Fatalf("errno = %v, want %v", errno, tc.want)
			}
			if want := (IO{Volume: "vol-a", Op: OpWrite, Off: 4096, Len: 512}); got != want {
				t.Fatalf("policy saw %+v, want %+v", got, want)
			}
		})
	}
}

// TestAvailableNamesTheDevice: without the device, the reason names it.
func TestAvailableNamesTheDevice(t *testing.T) {
	missing := t.TempDir() + "/fuse"
	err := availableAt(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("availableAt(%s) = %v, want ENOENT naming the device", missing, err)
	}
}

func TestVolumeOf(t *testing.T) {
	f := &FS{cfg: Config{Suffix: ".img"}}
	for name, want := range map[string]string{
		"vol-1.img": "vol-1", ".vol-1.img.123.tmp": "", ".vol-1.img": "", "vol-1": "", ".img": "", "vol-1.img.x": "",
	} {
		got, ok := f.volumeOf(name)
		if got != want || ok != (want != "") {
			t.Errorf("volumeOf(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

// TestChain: policies are asked in order, the first refusal wins, and the later ones are not asked.
func TestChain(t *testing.T) {
	var asked []string
	ask := func(name string, err error) Policy {
		return PolicyFunc(func(context.Context, IO) error { asked = append(asked, name); return err })
	}
	for _, tc := range []struct {
		name      string
		policies  []Policy
		want      error
		wantAsked string
	}{
		{"none", nil, nil, ""},
		{"nil skipped", []Policy{nil, ask("a", nil), nil}, nil, "a"},
		{"all through", []Policy{ask("a", nil), ask("b", nil)}, nil, "a,b"},
		{"first refusal wins", []Policy{ask("a", nil), ask("b", syscall.EIO), ask("c", syscall.EROFS)}, syscall.EIO, "a,b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = nil
			err := Chain(tc.policies...).Before(context.Background(), IO{Volume: "vol-a", Op: OpRead})
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if got := strings.Join(asked, ","); got != tc.wantAsked {
				t.Fatalf("asked %q, want %q", got, tc.wantAsked)
			}
		})
	}
}

func TestReportOf(t *testing.T) {
	f := &FS{cfg: Config{Suffix: ".img"}}
	for name, want := range map[string]string{
		ReportName("vol-1.img"): "vol-1", ".vol-1.img.report": "vol-1", "vol-1.img.report": "", ".vol-1.report": "",
		"..vol-1.img.report": "", ".vol-1.img": "", ".report": "",
	} {
		got, ok := f.reportOf(name)
		if got != want || ok != (want != "") {
			t.Errorf("reportOf(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
