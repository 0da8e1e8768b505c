package iofaults

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func do(t *testing.T, h http.Handler, method, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/io-faults", strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	inj := New(Options{})
	h := AdminHandler(inj)
	code, body := do(t, h, http.MethodPut, `{"rules":[{"volume":"vol-1","ops":["read"],"offset":4096,"length":4096,"effect":"error","errno":"EIO","count":2}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	_ = inj.Before(context.Background(), read("vol-1", 4096, 512))
	code, body = do(t, h, http.MethodGet, "")
	var doc struct {
		Rules []struct {
			Volume  string `json:"volume"`
			Faulted int64  `json:"faulted"`
			Left    *int64 `json:"left"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || code != http.StatusOK {
		t.Fatalf("GET: %d %s %v", code, body, err)
	}
	if len(doc.Rules) != 1 || doc.Rules[0].Faulted != 1 || doc.Rules[0].Left == nil || *doc.Rules[0].Left != 1 {
		t.Fatalf("GET answered %s", body)
	}
	if code, body = do(t, h, http.MethodDelete, ""); code != http.StatusOK || !strings.Contains(body, `"rules": []`) {
		t.Fatalf("DELETE: %d %s", code, body)
	}
}

func TestAdminRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, method, body, want string }{
		{"unknown field", http.MethodPut, `{"rules":[{"volume":"vol-1","effect":"error","severity":9}]}`, "unknown field"},
		{"invalid rule", http.MethodPut, `{"rules":[{"volume":"vol-1","effect":"melt"}]}`, "unknown effect"},
		{"not JSON", http.MethodPut, `rules`, "decode"},
		{"trailing data", http.MethodPut, `{"rules":[]} {}`, "trailing data"},
		{"bare duration number", http.MethodPut, `{"rules":[{"volume":"vol-1","effect":"latency","latency":20}]}`, "decode"},
		{"too large", http.MethodPut, `{"rules":[` + strings.Repeat(`{"volume":"vol-1","effect":"hang"},`, 3000) + `]}`, "too large"},
		{"method", http.MethodPost, `{}`, "not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inj := New(Options{})
			if err := inj.Set([]Rule{{Volume: "vol-keep", Effect: EffectHang}}); err != nil {
				t.Fatal(err)
			}
			code, body := do(t, AdminHandler(inj), tc.method, tc.body)
			if code/100 != 4 || !strings.Contains(body, tc.want) {
				t.Fatalf("%s: %d %s, want 4xx with %q", tc.name, code, body, tc.want)
			}
			if r := inj.Rules(); len(r) != 1 || r[0].Volume != "vol-keep" {
				t.Fatalf("refused request changed the rules: %+v", r)
			}
		})
	}
}

func TestAdminUnavailable(t *testing.T) {
	t.Parallel()
	h := AdminHandler(New(Options{Unavailable: errors.New("I/O faults need --backend fuse")}))
	code, body := do(t, h, http.MethodPut, `{"rules":[{"volume":"*","effect":"error"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "I/O faults need --backend fuse") {
		t.Fatalf("PUT without fuse: %d %s", code, body)
	}
	if code, _ := do(t, h, http.MethodPut, `{"rules":[]}`); code != http.StatusOK {
		t.Fatalf("PUT of no rules without fuse: %d", code)
	}
	if code, _ := do(t, h, http.MethodGet, ""); code != http.StatusOK {
		t.Fatalf("GET without fuse: %d", code)
	}
}
