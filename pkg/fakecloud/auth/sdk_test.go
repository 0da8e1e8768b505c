package auth

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// TestRealEC2Client checks that what the real SDK client sends verifies, end to end.
func TestRealEC2Client(t *testing.T) {
	v := NewVerifier(map[string]string{testKeyID: testSecret})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		if err := v.Verify(r, body); err != nil {
			ec2err.Write(w, "req-1", err)
			return
		}
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		_, _ = io.WriteString(w, `<DescribeAvailabilityZonesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">`+
			`<requestId>x</requestId><availabilityZoneInfo/></DescribeAvailabilityZonesResponse>`)
	}))
	defer srv.Close()

	tests := []struct {
		name     string
		id, key  string
		wantCode string // "" = success
	}{
		{"right credentials", testKeyID, testSecret, ""},
		{"wrong secret", testKeyID, "wrong", "AuthFailure"},
		{"unknown key", "AKIDUNKNOWN", testSecret, "AuthFailure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := ec2.New(ec2.Options{
				Region:           "us-east-1",
				BaseEndpoint:     aws.String(srv.URL),
				Credentials:      credentials.NewStaticCredentialsProvider(tt.id, tt.key, ""),
				RetryMaxAttempts: 1,
			})
			_, err := client.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{})
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("DescribeAvailabilityZones: %v", err)
				}
				return
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tt.wantCode {
				t.Fatalf("err = %v, want API error %s", err, tt.wantCode)
			}
		})
	}
}
