package ec2cloud

import (
	"context"
	"errors"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	metricRequests  = "diskforge_cloud_api_requests_total"
	metricDuration  = "diskforge_cloud_api_request_duration_seconds"
	metricBatchSize = "diskforge_cloud_describe_batch_size"
	metricWait      = "diskforge_cloud_wait_duration_seconds"
	metricPaced     = "diskforge_cloud_api_pacing_seconds"
)

// codeSuccess labels requests that succeeded.
const codeSuccess = "Success"

// metrics count every HTTP attempt the SDK makes, per EC2 action and result code, and time it. They are
// recorded by a middleware in the SDK's Deserialize step, which runs once per attempt (inside the retry loop),
// so retries are counted: these are the calls the cloud sees.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	batchSize *prometheus.HistogramVec
	// waitDuration times waits for asynchronous work, from the accepted call to the observed result.
	waitDuration *prometheus.HistogramVec
	// paced times how long each attempt waited for its turn under the action's request bucket (pace.go).
	paced *prometheus.HistogramVec
	// detaches are the detaches being waited for, and for how long (detachpending.go).
	detaches *detachPending
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRequests,
			Help: "EC2 API requests (HTTP attempts, retries included) by action and result code (Success or the EC2 error code).",
		}, []string{"action", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricDuration,
			Help:    "EC2 API request (HTTP attempt) latency by action.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"action"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricBatchSize,
			Help:    "Resources one batched Describe call observed for waiting operations.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}, []string{"resource"}),
		waitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricWait,
			Help:    "Time waiting for asynchronous work (create, attach, detach, modify, snapshot) by result (done, failed, timeout).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{"operation", "result"}),
		paced: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricPaced,
			Help:    "Time an EC2 API request (HTTP attempt) waited for its turn under its action's request bucket, by action.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"action"}),
		detaches: newDetachPending(time.Now),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.batchSize, m.waitDuration, m.paced, m.detaches)
	}
	return m
}

// addMiddleware is an SDK APIOptions entry.
func (m *metrics) addMiddleware(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("DiskforgeCloudMetrics", m.handle), middleware.Before)
}

func (m *metrics) handle(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	start := time.Now()
	out, md, err := next.HandleDeserialize(ctx, in)
	action := middleware.GetOperationName(ctx)
	if action == "" {
		action = awsmiddleware.GetOperationName(ctx)
	}
	m.requests.WithLabelValues(action, resultCode(ctx, err)).Inc()
	m.duration.WithLabelValues(action).Observe(time.Since(start).Seconds())
	return out, md, err
}

// resultCode labels an attempt: Success, the EC2 error code, Canceled, or ClientError (no answer).
func resultCode(ctx context.Context, err error) string {
	if err == nil {
		return codeSuccess
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() != "" {
		return apiErr.ErrorCode()
	}
	if ctx.Err() != nil {
		return "Canceled"
	}
	return "ClientError"
}
