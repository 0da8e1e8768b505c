package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diskforge_fakecloud_requests_total", Help: "EC2 API requests by action and result code (Success or the EC2 error code).",
		}, []string{"action", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "diskforge_fakecloud_request_duration_seconds", Help: "EC2 API request latency by action, including injected latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"action"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *metrics) observe(action, code string, d time.Duration) {
	if action == "" {
		action = "unknown"
	}
	m.requests.WithLabelValues(action, code).Inc()
	m.latency.WithLabelValues(action).Observe(d.Seconds())
}
