package fakecloudtest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync"
)

// Exchange is one EC2 Query request fakecloud served and the reply it gave.
type Exchange struct {
	Action string
	// Form is the request's parameters, body and URL query together, as fakecloud reads them.
	Form   url.Values
	Status int
	Body   []byte
}

// Recorder keeps every EC2 Query exchange of an Env started with it (Options.Recorder), and the names of the
// parameters fakecloud read for each action, so tests can hold real traffic to EC2's model.
type Recorder struct {
	mu        sync.Mutex
	exchanges []Exchange
	reads     map[string]map[string]bool
}

// Exchanges returns the exchanges so far, in the order they ended.
func (r *Recorder) Exchanges() []Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Exchange(nil), r.exchanges...)
}

// ParamsRead returns, per action, the parameter names fakecloud read.
func (r *Recorder) ParamsRead() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for action, names := range r.reads {
		for n := range names {
			out[action] = append(out[action], n)
		}
	}
	return out
}

func (r *Recorder) paramRead(action, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads == nil {
		r.reads = map[string]map[string]bool{}
	}
	if r.reads[action] == nil {
		r.reads[action] = map[string]bool{}
	}
	r.reads[action][name] = true
}

func paramRead(r *Recorder) func(action, name string) {
	if r == nil {
		return nil
	}
	return r.paramRead
}

// wrap records the exchanges next serves at "/", the EC2 Query endpoint.
func (r *Recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/" {
			next.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		for k, v := range req.URL.Query() {
			if _, ok := form[k]; !ok {
				form[k] = v
			}
		}
		tee := &teeWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(tee, req)
		r.mu.Lock()
		r.exchanges = append(r.exchanges, Exchange{Action: form.Get("Action"), Form: form, Status: tee.status, Body: tee.body.Bytes()})
		r.mu.Unlock()
	})
}

// teeWriter passes a reply on and keeps a copy.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (t *teeWriter) WriteHeader(code int) {
	t.status = code
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.body.Write(p)
	return t.ResponseWriter.Write(p)
}
