package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

func TestThrottledCounter(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	for _, c := range []struct{ action, code string }{
		{"CreateVolume", "Success"},
		{"CreateVolume", ec2err.CodeRequestLimitExceeded},
		{"CreateVolume", ec2err.CodeRequestLimitExceeded},
		{"AttachVolume", ec2err.CodeIncorrectState},
		{"DescribeVolumes", ec2err.CodeRequestLimitExceeded},
	} {
		m.observe(c.action, c.code, time.Millisecond)
	}
	for action, want := range map[string]float64{"CreateVolume": 2, "DescribeVolumes": 1, "AttachVolume": 0} {
		if got := value(t, m.throttled.WithLabelValues(action)); got != want {
			t.Errorf("throttled{%s} = %v, want %v", action, got, want)
		}
	}
	if got := value(t, m.requests.WithLabelValues("CreateVolume", ec2err.CodeRequestLimitExceeded)); got != 2 {
		t.Errorf("requests{CreateVolume,RequestLimitExceeded} = %v, want 2", got)
	}
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
