package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

const (
	testKeyID  = "AKIDFAKECLOUD"
	testSecret = "fakecloud-secret"
	testBody   = "Action=DescribeVolumes&Version=2016-11-15"
)

// testNow is the fixed server time of the table tests.
func testNow() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

// outcome is what the verifying server saw: "ok" or an EC2 error.
type outcome struct {
	code    string
	status  int
	message string
}

// verifyServer answers each request with the outcome of Verify, read on the server side of a real HTTP
// exchange so r.Host and headers look as they will in fakecloud.
func verifyServer(t *testing.T, v *Verifier) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		if err := v.Verify(r, body); err != nil {
			ec2err.Write(w, "req-1", err)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// request is a request as an SDK would send it: the SDK's own signer over the given body.
type request struct {
	keyID, secret, token string
	signedBody, sentBody string
	at                   time.Time
	noAuth               bool
	tamper               func(*http.Request)
}

func (rq request) send(t *testing.T, srv *httptest.Server) outcome {
	t.Helper()
	if rq.sentBody == "" {
		rq.sentBody = rq.signedBody
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(rq.signedBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
	if !rq.noAuth {
		sum := sha256.Sum256([]byte(rq.signedBody))
		creds := aws.Credentials{AccessKeyID: rq.keyID, SecretAccessKey: rq.secret, SessionToken: rq.token}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ec2", "us-east-1", rq.at); err != nil {
			t.Fatal(err)
		}
	}
	// Headers added after signing, as the transport does, are not covered and must not matter.
	req.Header.Set("User-Agent", "test-agent")
	req.Header.Set("X-Unsigned", "anything")
	req.Body = io.NopCloser(strings.NewReader(rq.sentBody))
	req.ContentLength = int64(len(rq.sentBody))
	if rq.tamper != nil {
		rq.tamper(req)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		return outcome{code: "ok", status: resp.StatusCode}
	}
	code, msg := between(string(b), "<Code>", "</Code>"), between(string(b), "<Message>", "</Message>")
	return outcome{code: code, status: resp.StatusCode, message: msg}
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}

func TestVerify(t *testing.T) {
	const badCreds = "AWS was not able to validate the provided access credentials"
	good := request{keyID: testKeyID, secret: testSecret, signedBody: testBody, at: testNow()}
	with := func(f func(*request)) request {
		r := good
		f(&r)
		return r
	}
	tests := []struct {
		name    string
		req     request
		code    string
		status  int
		message string // prefix
	}{
		{"right secret", good, "ok", 200, ""},
		{"session token is signed too", with(func(r *request) { r.token = "session" }), "ok", 200, ""},
		{"within skew", with(func(r *request) { r.at = testNow().Add(-14 * time.Minute) }), "ok", 200, ""},
		{"wrong secret", with(func(r *request) { r.secret = "guess" }), "AuthFailure", 401, badCreds},
		{"unknown key", with(func(r *request) { r.keyID = "AKIDUNKNOWN" }), "AuthFailure", 401, badCreds},
		{"missing header", with(func(r *request) { r.noAuth = true }), "MissingAuthenticationToken", 401, "Request is missing Authentication Token"},
		{"stale date", with(func(r *request) { r.at = testNow().Add(-20 * time.Minute) }), "AuthFailure", 401, "Signature expired: 20261130T114000Z is now earlier than 20261130T114500Z (20261130T120000Z - 15 min.)"},
		{"future date", with(func(r *request) { r.at = testNow().Add(20 * time.Minute) }), "AuthFailure", 401, "Signature not yet current"},
		{"tampered body", with(func(r *request) { r.sentBody = strings.Replace(testBody, "Volumes", "Volumez", 1) }), "AuthFailure", 401, badCreds},
		{"tampered signed header", with(func(r *request) {
			r.tamper = func(req *http.Request) { req.Header.Set("Content-Type", "text/plain") }
		}), "AuthFailure", 401, badCreds},
		{"signed header removed", with(func(r *request) {
			r.tamper = func(req *http.Request) { req.Header.Del("Amz-Sdk-Request") }
		}), "AuthFailure", 401, "signed header amz-sdk-request is missing"},
		{"date header changed", with(func(r *request) {
			r.tamper = func(req *http.Request) { req.Header.Set("X-Amz-Date", "20261130T120001Z") }
		}), "AuthFailure", 401, badCreds},
		{"missing date", with(func(r *request) {
			r.tamper = func(req *http.Request) { req.Header.Del("X-Amz-Date") }
		}), "AuthFailure", 401, "X-Amz-Date header is missing or invalid"},
		{"other scheme", with(func(r *request) {
			r.tamper = func(req *http.Request) { req.Header.Set("Authorization", "Basic dXNlcjpwYXNz") }
		}), "AuthFailure", 401, "Authorization header is invalid"},
		{"malformed credential", with(func(r *request) {
			r.tamper = func(req *http.Request) {
				req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20261130, SignedHeaders=host, Signature=00")
			}
		}), "AuthFailure", 401, "Authorization header is invalid"},
	}
	v := NewVerifier(map[string]string{testKeyID: testSecret, "AKIDOTHER": "other"}, WithClock(testNow))
	srv := verifyServer(t, v)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.req.send(t, srv)
			if got.code != tt.code || got.status != tt.status || !strings.HasPrefix(got.message, tt.message) {
				t.Errorf("got %+v, want %s %d %q", got, tt.code, tt.status, tt.message)
			}
		})
	}
}

func TestVerifyOff(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(testBody))
	for name, v := range map[string]*Verifier{"no keys": NewVerifier(nil), "nil": nil} {
		if v.Enabled() {
			t.Errorf("%s: Enabled", name)
		}
		if err := v.Verify(req, []byte(testBody)); err != nil {
			t.Errorf("%s: Verify = %v, want nil", name, err)
		}
	}
	if !NewVerifier(map[string]string{testKeyID: testSecret}).Enabled() {
		t.Error("verifier with keys not enabled")
	}
}

func TestVerifyReturnsEC2Errors(t *testing.T) {
	v := NewVerifier(map[string]string{testKeyID: testSecret})
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(testBody))
	var e *ec2err.Error
	if err := v.Verify(req, []byte(testBody)); !errors.As(err, &e) || e.Code != ec2err.CodeMissingAuthenticationToken || e.Status != http.StatusUnauthorized {
		t.Errorf("Verify = %#v", err)
	}
}

func TestKeysAreCopied(t *testing.T) {
	keys := map[string]string{testKeyID: testSecret}
	v := NewVerifier(keys, WithClock(testNow))
	keys[testKeyID] = "changed"
	srv := verifyServer(t, v)
	if got := (request{keyID: testKeyID, secret: testSecret, signedBody: testBody, at: testNow()}).send(t, srv); got.code != "ok" {
		t.Errorf("got %+v after caller changed its map", got)
	}
}
