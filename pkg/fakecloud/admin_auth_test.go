package fakecloud_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestAdminNeedsCredentialsWhenKeysAreSet: with access keys configured, /admin answers only requests signed
// with one of them or carrying the admin token; /healthz and /metrics stay open.
func TestAdminNeedsCredentialsWhenKeysAreSet(t *testing.T) {
	const token = "admin-secret-token"
	env := fakecloudtest.Start(t, fakecloudtest.Options{
		AccessKeys: map[string]string{fakecloudtest.AccessKeyID: fakecloudtest.SecretAccessKey}, AdminToken: token})
	c := env.EC2(t)
	ctx := context.Background()
	inst := env.Instances[zoneA]
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, vol, inst, "/dev/xvdba")

	sign := func(key, secret string) func(*http.Request, string) {
		return func(r *http.Request, body string) {
			sum := sha256.Sum256([]byte(body))
			err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, r,
				hex.EncodeToString(sum[:]), "ec2", env.Region, time.Now())
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	bearer := func(tok string) func(*http.Request, string) {
		return func(r *http.Request, _ string) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	cases := []struct {
		name, method, path, body string
		auth                     func(*http.Request, string)
		want                     int
	}{
		{"unsigned terminate", http.MethodDelete, "/admin/instances/" + inst, "", nil, 401},
		{"unsigned faults", http.MethodPut, "/admin/faults", `{"errors":{"DescribeVolumes":{"rate":1,"code":"InternalError"}}}`, nil, 401},
		{"wrong token", http.MethodPut, "/admin/faults", `{}`, bearer("guess"), 401},
		{"unknown key", http.MethodGet, "/admin/instances", "", sign("AKIDOTHER", "other"), 401},
		{"wrong secret", http.MethodGet, "/admin/volumes", "", sign(fakecloudtest.AccessKeyID, "wrong"), 401},
		{"signed", http.MethodGet, "/admin/instances", "", sign(fakecloudtest.AccessKeyID, fakecloudtest.SecretAccessKey), 200},
		{"signed with a body", http.MethodPut, "/admin/instances/i-0d000000000000009", `{"zone":"us-east-1a"}`,
			sign(fakecloudtest.AccessKeyID, fakecloudtest.SecretAccessKey), 200},
		{"token", http.MethodGet, "/admin/faults", "", bearer(token), 200},
		{"healthz", http.MethodGet, "/healthz", "", nil, 200},
		{"metrics", http.MethodGet, "/metrics", "", nil, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, env.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != nil {
				tc.auth(req, tc.body)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, raw, tc.want)
			}
		})
	}
	// The refused calls changed nothing: the volume is still attached and describes still work.
	if v := describeVolume(t, c, vol); len(v.Attachments) != 1 {
		t.Errorf("unsigned admin calls detached the volume: %+v", v.Attachments)
	}
}
