package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

type metrics struct {
	requests  *prometheus.CounterVec
	throttled *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diskforge_fakecloud_requests_total", Help: "EC2 API requests by action and result code (Success or the EC2 error code).",
		}, []string{"action", "code"}),
		// The same count as requests_total{code="RequestLimitExceeded"}, under the name one looks for; it holds
		// refusals by a rate-limit bucket (--rate-limits, --fault-rate-limit) and injected ones (--fault-error).
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diskforge_fakecloud_throttled_total", Help: "EC2 API requests answered RequestLimitExceeded, by action.",
		}, []string{"action"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "diskforge_fakecloud_request_duration_seconds", Help: "EC2 API request latency by action, including injected latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"action"}),
	}
	reg.MustRegister(m.requests, m.throttled, m.latency)
	return m
}

func (m *metrics) observe(action, code string, d time.Duration) {
	if action == "" {
		action = "unknown"
	}
	m.requests.WithLabelValues(action, code).Inc()
	if code == ec2err.CodeRequestLimitExceeded {
		m.throttled.WithLabelValues(action).Inc()
	}
	m.latency.WithLabelValues(action).Observe(d.Seconds())
}
