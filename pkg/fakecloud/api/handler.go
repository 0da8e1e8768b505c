// Package api is fakecloud's wire: it decodes EC2 Query requests, calls the state, and encodes EC2's XML
// replies and error envelopes. It holds no rules of its own; those live in the state package.
package api

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// apiVersion is the one EC2 API version fakecloud speaks.
const apiVersion = "2016-11-15"

// maxBody bounds a request body; EC2 Query requests are small.
const maxBody = 1 << 20

// Faults injects latency, throttling and errors around actions.
type Faults interface {
	// BeforeQuery runs ahead of the action, given the request's parameters (EC2 throttles Describe calls that
	// name neither a filter nor a page harder); an error is answered instead of running it.
	BeforeQuery(ctx context.Context, action string, params url.Values) error
	// After runs once the action changed state; an error replaces its reply, as when a real cloud's reply is lost.
	After(action string) error
}

// Authenticator checks request signatures.
type Authenticator interface {
	Verify(r *http.Request, body []byte) error
}

// Options are the Handler's collaborators. Faults and Auth may be nil.
type Options struct {
	State    *state.State
	Faults   Faults
	Auth     Authenticator
	Registry *prometheus.Registry
	// Admin serves the run-time admin endpoints under /admin (instances, faults); nil serves none.
	Admin http.Handler
	// AdminToken, when set, admits admin requests carrying it as a bearer token. Admin requests must carry it
	// or a SigV4 signature Auth accepts whenever either is configured.
	AdminToken string
	// ParamRead, when set, is told the name of every request parameter an action reads, whether or not the
	// request carried it: tests hold the names to EC2's model.
	ParamRead func(action, name string)
}

type actionFunc func(*params) (response, error)

// Handler serves the EC2 Query API plus /healthz, /metrics and /admin.
type Handler struct {
	state     *state.State
	faults    Faults
	auth      Authenticator
	actions   map[string]actionFunc
	zoneIDs   map[string]string
	accountID string
	metrics   *metrics
	router    chi.Router
	paramRead func(action, name string)
}

// New builds the handler.
func New(opts Options) *Handler {
	h := &Handler{state: opts.State, faults: opts.Faults, auth: opts.Auth, zoneIDs: map[string]string{}, accountID: opts.State.AccountID(),
		paramRead: opts.ParamRead}
	for _, z := range opts.State.Zones() {
		h.zoneIDs[z.Name] = z.ID
	}
	h.actions = map[string]actionFunc{
		"CreateVolume":                 h.createVolume,
		"CopyVolumes":                  h.copyVolumes,
		"DeleteVolume":                 h.deleteVolume,
		"DescribeVolumes":              h.describeVolumes,
		"AttachVolume":                 h.attachVolume,
		"DetachVolume":                 h.detachVolume,
		"ModifyVolume":                 h.modifyVolume,
		"DescribeVolumesModifications": h.describeVolumesModifications,
		"DescribeVolumeAttribute":      h.describeVolumeAttribute,
		"ModifyVolumeAttribute":        h.modifyVolumeAttribute,
		"CreateSnapshot":               h.createSnapshot,
		"DeleteSnapshot":               h.deleteSnapshot,
		"DescribeSnapshots":            h.describeSnapshots,
		"EnableFastSnapshotRestores":   h.enableFastSnapshotRestores,
		"DisableFastSnapshotRestores":  h.disableFastSnapshotRestores,
		"DescribeFastSnapshotRestores": h.describeFastSnapshotRestores,
		"DescribeVolumeStatus":         h.describeVolumeStatus,
		"CreateTags":                   h.createTags,
		"DeleteTags":                   h.deleteTags,
		"DescribeTags":                 h.describeTags,
		"DescribeInstances":            h.describeInstances,
		"StartInstances":               h.startInstances,
		"StopInstances":                h.stopInstances,
		"TerminateInstances":           h.terminateInstances,
		"ModifyInstanceAttribute":      h.modifyInstanceAttribute,
		"DescribeAvailabilityZones":    h.describeAvailabilityZones,
		"DescribeInstanceTypes":        h.describeInstanceTypes,
		"RunInstances":                 h.runInstances,
		"DescribeImages":               h.describeImages,
	}
	h.addSnapshotActions()
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	h.metrics = newMetrics(reg)
	r := chi.NewRouter()
	r.Use(recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if opts.Admin != nil {
		r.Mount("/admin", AdminGuard(opts.Auth, opts.AdminToken, opts.Admin))
	}
	r.Post("/", h.serveQuery)
	r.Get("/", h.serveQuery)
	h.router = r
	return h
}

// Actions lists the EC2 actions the handler serves, sorted.
func (h *Handler) Actions() []string { return slices.Sorted(maps.Keys(h.actions)) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.router.ServeHTTP(w, r) }

// serveQuery runs one EC2 Query request: authenticate, inject faults, run the action, reply.
func (h *Handler) serveQuery(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	requestID := uuid.NewString()
	w.Header().Set("X-Amzn-Requestid", requestID)
	action, resp, err := h.handle(r)
	code := "Success"
	if err != nil {
		e := ec2err.As(err)
		code = e.Code
		if code == ec2err.CodeInternalError {
			klog.ErrorS(err, "Request failed", "action", action, "requestID", requestID)
		}
		ec2err.Write(w, requestID, e)
	} else if werr := writeXML(w, action, requestID, resp); werr != nil {
		// The client went away; its request was served all the same.
		klog.V(2).InfoS("Writing reply failed", "action", action, "requestID", requestID, "err", werr)
	}
	if _, known := h.actions[action]; !known {
		// Unknown names stay out of metric labels: they are unbounded and may not be UTF-8.
		action = "unknown"
	}
	h.metrics.observe(action, code, time.Since(start))
	klog.V(4).InfoS("Request", "action", action, "code", code, "requestID", requestID, "duration", time.Since(start))
}

func (h *Handler) handle(r *http.Request) (string, response, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return "", nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The request body could not be read: %v", err)
	}
	if h.auth != nil {
		if err := h.auth.Verify(r, body); err != nil {
			return "", nil, err
		}
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return "", nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The request body is not a valid form: %v", err)
	}
	for k, v := range r.URL.Query() {
		if _, ok := form[k]; !ok {
			form[k] = v
		}
	}
	action := form.Get("Action")
	if action == "" {
		return "", nil, ec2err.Missing("Action")
	}
	fn, ok := h.actions[action]
	if !ok {
		return action, nil, ec2err.New(ec2err.CodeInvalidAction, "The action %s is not valid for this web service.", action)
	}
	switch v := form.Get("Version"); {
	case v == "":
		return action, nil, ec2err.Missing("Version")
	case v != apiVersion:
		return action, nil, ec2err.New(ec2err.CodeNoSuchVersion, "The requested version (%s) of service AmazonEC2 does not exist", v)
	}
	if h.faults != nil {
		if err := h.faults.BeforeQuery(r.Context(), action, form); err != nil {
			return action, nil, err
		}
	}
	p := &params{v: form}
	if h.paramRead != nil {
		p.read = func(name string) { h.paramRead(action, name) }
	}
	dryRun := p.boolean("DryRun")
	resp, err := fn(p)
	// Mutating actions answer DryRun themselves, before changing anything; reads answer it here, once the
	// request has been checked in full.
	if err == nil && dryRun {
		return action, nil, ec2err.DryRun()
	}
	if h.faults != nil && err == nil {
		if ferr := h.faults.After(action); ferr != nil {
			return action, nil, ferr
		}
	}
	return action, resp, err
}

// recoverer answers a panic with EC2's InternalError instead of a dropped connection; it logs the panic, since
// any panic is a bug.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				klog.ErrorS(nil, "Panic serving request", "panic", p, "stack", string(debug.Stack()))
				ec2err.Write(w, uuid.NewString(), ec2err.New(ec2err.CodeInternalError, "An internal error has occurred"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
