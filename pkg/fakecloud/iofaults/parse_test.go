package iofaults

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

func TestParseRule(t *testing.T) {
	t.Parallel()
	ms := func(n int) faults.Duration { return faults.Duration(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		spec string
		want Rule
	}{
		{"vol-0123:read:eio", Rule{Volume: "vol-0123", Ops: []string{"read"}, Effect: EffectError, Errno: "EIO"}},
		{"vol-1:EIO", Rule{Volume: "vol-1", Effect: EffectError, Errno: "EIO"}},
		{"vol-1:error", Rule{Volume: "vol-1", Effect: EffectError}},
		{"vol-1:error=enospc", Rule{Volume: "vol-1", Effect: EffectError, Errno: "ENOSPC"}},
		{"*:write:latency=20ms", Rule{Volume: "*", Ops: []string{"write"}, Effect: EffectLatency, Latency: ms(20)}},
		{"vol-1@1048576+4096:read:eio", Rule{Volume: "vol-1", Offset: 1 << 20, Length: 4096, Ops: []string{"read"}, Effect: EffectError, Errno: "EIO"}},
		{"vol-1@1Mi+4Ki:eio", Rule{Volume: "vol-1", Offset: 1 << 20, Length: 4096, Effect: EffectError, Errno: "EIO"}},
		{"vol-1@1Gi+0:write:enospc", Rule{Volume: "vol-1", Offset: 1 << 30, Ops: []string{"write"}, Effect: EffectError, Errno: "ENOSPC"}},
		{"vol-1:readonly", Rule{Volume: "vol-1", Effect: EffectReadOnly}},
		{"vol-1:hang", Rule{Volume: "vol-1", Effect: EffectHang}},
		{"vol-1:fsync:hang", Rule{Volume: "vol-1", Ops: []string{"fsync"}, Effect: EffectHang}},
		{"vol-1:read,write:enospc:p=0.1", Rule{Volume: "vol-1", Ops: []string{"read", "write"}, Effect: EffectError, Errno: "ENOSPC", Probability: 0.1}},
		{"vol-1:eio:count=3:p=1", Rule{Volume: "vol-1", Effect: EffectError, Errno: "EIO", Count: 3, Probability: 1}},
		{" vol-1:hang ", Rule{Volume: "vol-1", Effect: EffectHang}},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseRule(tc.spec)
			if err != nil {
				t.Fatalf("ParseRule: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseRuleRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"", "want VOLUME"},
		{"vol-1", "want VOLUME"},
		{"vol-1:read", "must be followed by an effect"},
		{"vol-1:melt", "unknown effect"},
		{"vol-1:read:write", "followed by an effect"},
		{"vol-1:reed:eio", "unknown effect"},
		{"vol-1:latency", "needs a duration"},
		{"vol-1:latency=fast", "latency"},
		{"vol-1:latency=0s", "not in (0"},
		{"vol-1:error=", "needs an errno"},
		{"vol-1:error=EWHAT", "unknown errno"},
		{"vol-1:hang=1s", "takes no value"},
		{"vol-1:read:readonly", "takes no ops"},
		{"vol-1@4096:eio", "not OFFSET+LENGTH"},
		{"vol-1@x+1:eio", "offset"},
		{"vol-1@1+-1:eio", "length"},
		{"vol-1@1+99999999999Gi:eio", "too large"},
		{"vol-1@0+1:fsync:eio", "cannot match fsync"},
		{"vol-1:eio:p=0", "not in (0, 1]"},
		{"vol-1:eio:p=2", "not in (0, 1]"},
		{"vol-1:eio:p=x", "invalid syntax"},
		{"vol-1:eio:count=0", "not positive"},
		{"vol-1:eio:count=1:count=2", "given twice"},
		{"vol-1:eio:n=1", "unknown modifier"},
		{"vol-1:eio:sometimes", "not p=PROBABILITY"},
		{"vol/1:eio", "neither a volume ID"},
		{":eio", "neither a volume ID"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseRule(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRule(%q) = %v, want an error containing %q", tc.spec, err, tc.want)
			}
		})
	}
}

// TestFlag: --fault-io is repeatable and takes ';'-separated rules; a bad rule fails flag parsing.
func TestFlag(t *testing.T) {
	t.Parallel()
	var f Flag
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&f, "fault-io", Grammar)
	if err := fs.Parse([]string{"--fault-io=vol-1:eio; *:latency=1ms;", "--fault-io", "vol-2:hang"}); err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) != 3 || f.Rules[2].Volume != "vol-2" {
		t.Fatalf("rules %+v", f.Rules)
	}
	var bad Flag
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	fs.Var(&bad, "fault-io", Grammar)
	if err := fs.Parse([]string{"--fault-io=vol-1:eio;vol-2:nope"}); err == nil || !strings.Contains(err.Error(), "vol-2:nope") {
		t.Fatalf("bad flag: %v", err)
	}
}
