package fakecloudtest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// RequestLog records the parameters of every EC2 request that passes through its proxy, as fakecloud receives
// them: what a client sent, not what it meant to (a Force flag, a retry).
type RequestLog struct {
	mu   sync.Mutex
	reqs []url.Values
}

// RecordingProxy serves a proxy to the fakecloud at target that records every request, until the test ends; it
// returns the log and the proxy's URL, the endpoint to give the client.
func RecordingProxy(t testing.TB, target string) (*RequestLog, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	log := &RequestLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if v, err := url.ParseQuery(string(body)); err == nil {
			log.mu.Lock()
			log.reqs = append(log.reqs, v)
			log.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return log, srv.URL
}

// Requests returns, in order, the requests of action whose parameters include every key=value of with.
func (l *RequestLog) Requests(action string, with ...string) []url.Values {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []url.Values
next:
	for _, v := range l.reqs {
		if v.Get("Action") != action {
			continue
		}
		for _, kv := range with {
			k, want, _ := strings.Cut(kv, "=")
			if v.Get(k) != want {
				continue next
			}
		}
		out = append(out, v)
	}
	return out
}

// Count counts the requests Requests would return.
func (l *RequestLog) Count(action string, with ...string) int {
	return len(l.Requests(action, with...))
}
