package faults

import (
	"flag"
	"reflect"
	"testing"
	"time"
)

func TestSpecConfig(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want Config
		ok   bool
	}{
		{"empty", Spec{}, Config{}, true},
		{
			name: "all flags",
			spec: Spec{
				Latency:   "CreateVolume=200ms, *=5ms",
				Errors:    "AttachVolume=0.2:InternalError,CreateVolume=1:RequestLimitExceeded:2:before,DeleteVolume=1:IncorrectState:after",
				RateLimit: "50/100,CreateVolume=0.5/2",
				Stuck:     "attach,detach",
			},
			want: Config{
				Latency: map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond), "*": Duration(5 * time.Millisecond)},
				Errors: map[string]ErrorFault{
					"AttachVolume": {Rate: 0.2, Code: "InternalError"},
					"CreateVolume": {Rate: 1, Code: "RequestLimitExceeded", Count: 2, Before: true},
					"DeleteVolume": {Rate: 1, Code: "IncorrectState"},
				},
				RateLimit:        Limit{RequestsPerSecond: 50, Burst: 100},
				ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 0.5, Burst: 2}},
				Stuck:            []string{"attach", "detach"},
			},
			ok: true,
		},
		{"latency without =", Spec{Latency: "200ms"}, Config{}, false},
		{"latency bad duration", Spec{Latency: "CreateVolume=fast"}, Config{}, false},
		{"latency empty action", Spec{Latency: "=5ms"}, Config{}, false},
		{"latency repeated action", Spec{Latency: "A=1ms,A=2ms"}, Config{}, false},
		{"error without code", Spec{Errors: "AttachVolume=0.2"}, Config{}, false},
		{"error empty code", Spec{Errors: "AttachVolume=0.2:"}, Config{}, false},
		{"error rate too high", Spec{Errors: "AttachVolume=2:InternalError"}, Config{}, false},
		{"error rate not a number", Spec{Errors: "AttachVolume=often:InternalError"}, Config{}, false},
		{"error bad count", Spec{Errors: "AttachVolume=1:InternalError:twice"}, Config{}, false},
		{"error negative count", Spec{Errors: "AttachVolume=1:InternalError:-1"}, Config{}, false},
		{"error phase before count", Spec{Errors: "AttachVolume=1:InternalError:before:2"}, Config{}, false},
		{"error too many parts", Spec{Errors: "AttachVolume=1:InternalError:2:before:x"}, Config{}, false},
		{"rate limit without slash", Spec{RateLimit: "50"}, Config{}, false},
		{"rate limit bad burst", Spec{RateLimit: "50/lots"}, Config{}, false},
		{"rate limit negative", Spec{RateLimit: "-1/5"}, Config{}, false},
		{"rate limit shared twice", Spec{RateLimit: "50/100,10/10"}, Config{}, false},
		{"stuck unknown", Spec{Stuck: "attach,reboot"}, Config{}, false},
		{"stuck counted", Spec{Stuck: "attach:2,detach"}, Config{Stuck: []string{"attach:2", "detach"}}, true},
		{"stuck count of another transition", Spec{Stuck: "detach:1"}, Config{}, false},
		{"stuck count zero", Spec{Stuck: "attach:0"}, Config{}, false},
		{"stuck count not a number", Spec{Stuck: "attach:once"}, Config{}, false},
		{"stuck two counts", Spec{Stuck: "attach:1,attach:2"}, Config{}, false},
		{"rate limits ec2", Spec{RateLimits: "ec2"}, Config{RateLimitProfile: ProfileEC2}, true},
		{"rate limits none", Spec{RateLimits: "none"}, Config{}, true},
		{"rate limits unknown", Spec{RateLimits: "gce"}, Config{}, false},
		{
			name: "rate limits beside fault-rate-limit",
			spec: Spec{RateLimits: "ec2", RateLimit: "100/200,Describe*=40/200,DescribeVolumes:unfiltered=0/0"},
			want: Config{RateLimitProfile: ProfileEC2, RateLimit: Limit{RequestsPerSecond: 100, Burst: 200},
				ActionRateLimits: map[string]Limit{"Describe*": {RequestsPerSecond: 40, Burst: 200}, "DescribeVolumes:unfiltered": {}}},
			ok: true,
		},
		{"star inside a key", Spec{Latency: "Desc*ribe=1ms"}, Config{}, false},
		{"unfiltered of a prefix", Spec{RateLimit: "Describe*:unfiltered=1/1"}, Config{}, false},
		{"unfiltered of nothing", Spec{RateLimit: ":unfiltered=1/1"}, Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.Config()
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSpecRegisterFlags(t *testing.T) {
	var s Spec
	fs := flag.NewFlagSet("fakecloud", flag.ContinueOnError)
	s.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--fault-latency=CreateVolume=200ms,*=5ms",
		"--fault-error=AttachVolume=0.2:InternalError",
		"--fault-rate-limit=50/100",
		"--fault-stuck=attach,detach",
		"--rate-limits=ec2",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Latency:    "CreateVolume=200ms,*=5ms",
		Errors:     "AttachVolume=0.2:InternalError",
		RateLimit:  "50/100",
		Stuck:      "attach,detach",
		RateLimits: "ec2",
	}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if _, err := s.Config(); err != nil {
		t.Errorf("Config: %v", err)
	}
}
