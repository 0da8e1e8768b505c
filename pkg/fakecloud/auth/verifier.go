// Package auth optionally checks the AWS Signature Version 4 on fakecloud's requests, so a test can prove a
// client signs with the credentials it was given. Real EC2 clients sign every request; fakecloud only checks
// when it was given keys.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// DefaultMaxSkew is how far a request's X-Amz-Date may be from the server's clock, as in AWS.
const DefaultMaxSkew = 15 * time.Minute

const amzDateFormat = "20060102T150405Z"

// Verifier checks SigV4 Authorization headers against a fixed set of access keys. It is safe for concurrent
// use. A nil Verifier, or one with no keys, accepts everything.
type Verifier struct {
	keys    map[string]string
	now     func() time.Time
	maxSkew time.Duration
	signer  *v4.Signer
}

// Option changes a Verifier's clock or skew tolerance.
type Option func(*Verifier)

// WithClock replaces the clock request dates are compared with.
func WithClock(now func() time.Time) Option { return func(v *Verifier) { v.now = now } }

// WithMaxSkew replaces DefaultMaxSkew.
func WithMaxSkew(d time.Duration) Option { return func(v *Verifier) { v.maxSkew = d } }

// NewVerifier returns a Verifier accepting requests signed with one of keys (access key ID → secret access
// key). With no keys, authentication is off.
func NewVerifier(keys map[string]string, opts ...Option) *Verifier {
	v := &Verifier{keys: maps.Clone(keys), now: time.Now, maxSkew: DefaultMaxSkew, signer: v4.NewSigner()}
	for _, opt := range opts {
		opt(v)
	}
	return v
}

// Enabled reports whether v checks signatures.
func (v *Verifier) Enabled() bool { return v != nil && len(v.keys) > 0 }

// Verify checks r's signature over body (r's body, already read by the caller). It returns nil or an
// *ec2err.Error: MissingAuthenticationToken without an Authorization header, AuthFailure otherwise.
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	if !v.Enabled() {
		return nil
	}
	header := r.Header.Get("Authorization")
	if header == "" {
		return ec2err.New(ec2err.CodeMissingAuthenticationToken, "Request is missing Authentication Token")
	}
	a, err := parseAuthorization(header)
	if err != nil {
		return authFailure("Authorization header is invalid: %v", err)
	}
	secret, ok := v.keys[a.accessKeyID]
	if !ok {
		return invalidCredentials()
	}
	signedAt, err := time.Parse(amzDateFormat, r.Header.Get("X-Amz-Date"))
	if err != nil {
		return authFailure("X-Amz-Date header is missing or invalid")
	}
	if err := v.checkSkew(signedAt); err != nil {
		return err
	}
	want, err := v.sign(r.Context(), r, body, a, secret, signedAt)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(a.signature), []byte(want)) {
		return invalidCredentials()
	}
	return nil
}

// checkSkew refuses dates too far from now, worded as AWS words it.
func (v *Verifier) checkSkew(signedAt time.Time) error {
	now := v.now().UTC()
	switch {
	case signedAt.Before(now.Add(-v.maxSkew)):
		return authFailure("Signature expired: %s is now earlier than %s (%s - %s.)",
			signedAt.Format(amzDateFormat), now.Add(-v.maxSkew).Format(amzDateFormat), now.Format(amzDateFormat), skewText(v.maxSkew))
	case signedAt.After(now.Add(v.maxSkew)):
		return authFailure("Signature not yet current: %s is still later than %s (%s + %s.)",
			signedAt.Format(amzDateFormat), now.Add(v.maxSkew).Format(amzDateFormat), now.Format(amzDateFormat), skewText(v.maxSkew))
	}
	return nil
}

func skewText(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

// sign recomputes the signature the client should have sent. Re-signing a copy holding only the signed
// headers with the SDK's own signer reproduces the client's canonical request exactly, without a second
// SigV4 implementation to keep in step.
func (v *Verifier) sign(ctx context.Context, r *http.Request, body []byte, a authorization, secret string, signedAt time.Time) (string, error) {
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), nil)
	if err != nil {
		return "", authFailure("request cannot be rebuilt for signing: %v", err)
	}
	req.Host = r.Host
	if !slices.Contains(a.signedHeaders, "host") {
		return "", authFailure("SignedHeaders must include host")
	}
	for _, name := range a.signedHeaders {
		switch name {
		case "host":
			// The signer takes the host from req.Host.
		case "content-length":
			// The signer takes the length from req.ContentLength; the body is what we check.
			req.ContentLength = int64(len(body))
		default:
			values := r.Header.Values(name)
			if len(values) == 0 {
				return "", authFailure("signed header %s is missing", name)
			}
			req.Header[http.CanonicalHeaderKey(name)] = values
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: a.accessKeyID, SecretAccessKey: secret}
	if err := v.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), a.service, a.region, signedAt); err != nil {
		return "", ec2err.Internal(fmt.Errorf("re-sign request: %w", err))
	}
	resigned, err := parseAuthorization(req.Header.Get("Authorization"))
	if err != nil {
		return "", ec2err.Internal(fmt.Errorf("parse re-signed authorization: %w", err))
	}
	return resigned.signature, nil
}

// invalidCredentials is EC2's answer to both an unknown key and a wrong signature; telling them apart would
// help an attacker.
func invalidCredentials() *ec2err.Error {
	return ec2err.New(ec2err.CodeAuthFailure, "AWS was not able to validate the provided access credentials")
}

func authFailure(format string, args ...any) *ec2err.Error {
	return ec2err.New(ec2err.CodeAuthFailure, format, args...)
}
