package faults

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAdminHandler(t *testing.T) {
	inj := mustNew(t, Config{Stuck: []string{TransitionAttach}})
	srv := httptest.NewServer(AdminHandler(inj))
	defer srv.Close()

	do := func(method, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	decode := func(s string) Config {
		t.Helper()
		var c Config
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatalf("decode %s: %v", s, err)
		}
		return c
	}

	if status, body := do(http.MethodGet, ""); status != http.StatusOK || !reflect.DeepEqual(decode(body), inj.Config()) {
		t.Fatalf("GET = %d %s", status, body)
	}

	put := `{
		"latency": {"CreateVolume": "200ms", "*": "5ms"},
		"errors": {"AttachVolume": {"rate": 0.2, "code": "InternalError", "count": 3, "before": true}},
		"rateLimit": {"requestsPerSecond": 50, "burst": 100},
		"rateLimitProfile": "ec2",
		"actionRateLimits": {"CreateVolume": {"requestsPerSecond": 1, "burst": 2}},
		"stuck": ["detach"]
	}`
	want := Config{
		Latency:          map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond), "*": Duration(5 * time.Millisecond)},
		Errors:           map[string]ErrorFault{"AttachVolume": {Rate: 0.2, Code: "InternalError", Count: 3, Before: true}},
		RateLimit:        Limit{RequestsPerSecond: 50, Burst: 100},
		RateLimitProfile: ProfileEC2,
		ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 1, Burst: 2}},
		Stuck:            []string{"detach"},
	}
	if status, body := do(http.MethodPut, put); status != http.StatusOK || !reflect.DeepEqual(decode(body), want) {
		t.Fatalf("PUT = %d %s", status, body)
	}
	if got := inj.Config(); !reflect.DeepEqual(got, want) {
		t.Fatalf("live config %+v, want %+v", got, want)
	}
	status, body := do(http.MethodGet, "")
	if status != http.StatusOK || !reflect.DeepEqual(decode(body), want) {
		t.Fatalf("GET after PUT = %d %s", status, body)
	}
	if !strings.Contains(body, `"200ms"`) {
		t.Errorf("latency not written as a duration string: %s", body)
	}

	for _, bad := range []string{
		`{"errors": {"*": {"rate": 2, "code": "InternalError"}}}`,
		`{"stuck": ["reboot"]}`,
		`{"stuck": ["attach:0"]}`,
		`{"latency": {"*": 5}}`,
		`{"latncy": {"*": "5ms"}}`,
		`{"rateLimitProfile": "gce"}`,
		`not json`,
	} {
		if status, body := do(http.MethodPut, bad); status != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("PUT %s = %d %s, want 400", bad, status, body)
		}
	}
	if got := inj.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("rejected PUT changed the config: %+v", got)
	}

	if status, _ := do(http.MethodPut, `{}`); status != http.StatusOK || !reflect.DeepEqual(inj.Config(), Config{}) {
		t.Errorf("PUT {} = %d, config %+v", status, inj.Config())
	}
	if status, _ := do(http.MethodDelete, ""); status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE = %d, want 405", status)
	}
}
