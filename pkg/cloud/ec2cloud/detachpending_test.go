package ec2cloud

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestDetachPending(t *testing.T) {
	const header = "# HELP diskforge_cloud_detach_pending_seconds How long a detach has been pending (from the first wait for it, across retries), per volume and instance, while it is.\n" +
		"# TYPE diskforge_cloud_detach_pending_seconds gauge\n"
	series := func(lines ...string) *string {
		text := ""
		if len(lines) > 0 {
			text = header + strings.Join(lines, "\n") + "\n"
		}
		return &text
	}
	const a, b = `diskforge_cloud_detach_pending_seconds{instance_id="i-1",volume_id="vol-a"}`, `diskforge_cloud_detach_pending_seconds{instance_id="i-1",volume_id="vol-b"}`
	type step struct {
		advance time.Duration
		do      func(d *detachPending, ends map[string]func(bool))
		// want is the exposition after the step; nil: not looked at.
		want *string
	}
	startA := func(name string) func(d *detachPending, ends map[string]func(bool)) {
		return func(d *detachPending, ends map[string]func(bool)) { ends[name] = d.start("vol-a", "i-1") }
	}
	end := func(name string, done bool) func(d *detachPending, ends map[string]func(bool)) {
		return func(_ *detachPending, ends map[string]func(bool)) { ends[name](done) }
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"reported while waited for, gone when done", []step{
			{do: startA("w1"), want: series(a + " 0")},
			{advance: 30 * time.Second, want: series(a + " 30")},
			{advance: 5 * time.Second, do: end("w1", true), want: series()},
		}},
		{"a retry after the caller's deadline carries on from the first start", []step{
			{do: startA("w1")},
			{advance: 2 * time.Minute, do: end("w1", false), want: series(a + " 120")},
			{advance: time.Second, do: startA("w2"), want: series(a + " 121")},
			{advance: time.Minute, want: series(a + " 181")},
			{do: end("w2", true), want: series()},
		}},
		{"an abandoned detach is dropped after a while", []step{
			{do: startA("w1")},
			{do: end("w1", false)},
			{advance: detachForget, want: series(a + " 600")},
			{advance: time.Second, want: series()},
			{do: startA("w2"), want: series(a + " 0")},
		}},
		{"failed for good is over", []step{
			{do: startA("w1")},
			{do: func(d *detachPending, ends map[string]func(bool)) { ends["b"] = d.start("vol-b", "i-1") }},
			{advance: time.Second, do: end("w1", true), want: series(b + " 1")},
		}},
		{"concurrent waits: over when one sees it done", []step{
			{do: startA("w1")},
			{advance: time.Second, do: startA("w2")},
			{advance: time.Second, do: end("w1", false), want: series(a + " 2")},
			{do: end("w2", true), want: series()},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			d := newDetachPending(func() time.Time { return now })
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(d)
			ends := map[string]func(bool){}
			for i, s := range tt.steps {
				now = now.Add(s.advance)
				if s.do != nil {
					s.do(d, ends)
				}
				if s.want == nil {
					continue
				}
				if err := testutil.GatherAndCompare(reg, strings.NewReader(*s.want), metricDetachPending); err != nil {
					t.Errorf("step %d: %v", i, err)
				}
			}
		})
	}
}
