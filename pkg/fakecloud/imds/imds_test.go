package imds_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func startCloud(t *testing.T) *fakecloudtest.Env {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{
		{ID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "c5.large", NetworkInterfaces: 3},
		{ID: fakecloudtest.InstanceB, Zone: "us-east-1b"},
	}
	return fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
}

// TestSDKClient: the SDK's own IMDS client, unchanged, reads each instance's identity from its own endpoint.
func TestSDKClient(t *testing.T) {
	e := startCloud(t)
	ctx := context.Background()
	tests := []struct{ id, zone, typ string }{
		{fakecloudtest.InstanceA, "us-east-1a", "c5.large"},
		{fakecloudtest.InstanceB, "us-east-1b", "m5.large"}, // no type given: the default type
	}
	for _, tc := range tests {
		client := imds.New(imds.Options{Endpoint: e.IMDS(t, tc.id)})
		doc, err := client.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
		if err != nil {
			t.Fatalf("%s: identity document: %v", tc.id, err)
		}
		if doc.InstanceID != tc.id || doc.AvailabilityZone != tc.zone || doc.InstanceType != tc.typ || doc.Region != "us-east-1" {
			t.Errorf("%s: document %+v", tc.id, doc.InstanceIdentityDocument)
		}
		for path, want := range map[string]string{
			"instance-id": tc.id, "instance-type": tc.typ, "placement/availability-zone": tc.zone,
			"block-device-mapping/": "ami\nroot", "block-device-mapping/root": "/dev/xvda",
		} {
			out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.id, path, err)
			}
			body, _ := io.ReadAll(out.Content)
			if string(body) != want {
				t.Errorf("%s: %s = %q, want %q", tc.id, path, body, want)
			}
		}
		region, err := client.GetRegion(ctx, &imds.GetRegionInput{})
		if err != nil || region.Region != "us-east-1" {
			t.Errorf("%s: region %+v, %v", tc.id, region, err)
		}
	}
	// An unknown path is 404 to the client.
	client := imds.New(imds.Options{Endpoint: e.IMDS(t, fakecloudtest.InstanceA)})
	_, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: "no-such-thing"})
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusNotFound {
		t.Errorf("unknown path: %v, want 404", err)
	}
}

// TestNetworkInterfaces: network/interfaces/macs/ lists one MAC per interface (the primary one by default), each
// answering its device number, interface ID and MAC, as a node plugin reads them to count the interfaces.
func TestNetworkInterfaces(t *testing.T) {
	e := startCloud(t)
	ctx := context.Background()
	read := func(id, path string) (string, error) {
		out, err := imds.New(imds.Options{Endpoint: e.IMDS(t, id)}).GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
		if err != nil {
			return "", err
		}
		body, err := io.ReadAll(out.Content)
		return string(body), err
	}
	for id, want := range map[string]int{fakecloudtest.InstanceA: 3, fakecloudtest.InstanceB: 1} {
		list, err := read(id, "network/interfaces/macs/")
		if err != nil {
			t.Fatalf("%s: macs: %v", id, err)
		}
		macs := strings.Fields(list)
		if len(macs) != want {
			t.Fatalf("%s: macs = %q, want %d entries", id, list, want)
		}
		seen := map[string]bool{}
		for i, entry := range macs {
			mac := strings.TrimSuffix(entry, "/")
			for key, want := range map[string]string{"mac": mac, "device-number": strconv.Itoa(i)} {
				if got, err := read(id, "network/interfaces/macs/"+mac+"/"+key); err != nil || got != want {
					t.Errorf("%s: %s/%s = %q, %v; want %q", id, mac, key, got, err, want)
				}
			}
			eni, err := read(id, "network/interfaces/macs/"+mac+"/interface-id")
			if err != nil || !strings.HasPrefix(eni, "eni-") || len(eni) != len("eni-")+17 || seen[eni] {
				t.Errorf("%s: %s/interface-id = %q, %v", id, mac, eni, err)
			}
			seen[eni] = true
		}
	}
	if _, err := read(fakecloudtest.InstanceB, "network/interfaces/macs/02:00:00:00:00:00/mac"); err == nil {
		t.Errorf("an unknown MAC answered")
	}
}

// TestProtocol: IMDSv2 only, with EC2's answers to requests that are wrong or hostile.
func TestProtocol(t *testing.T) {
	e := startCloud(t)
	base := e.IMDS(t, fakecloudtest.InstanceA)
	gone := e.IMDS(t, "i-0ffffffffffffffff") // an instance fakecloud does not know

	do := func(method, url string, hdr map[string]string) (int, string) {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	token := func(u string) string {
		code, tok := do(http.MethodPut, u+"/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
		if code != http.StatusOK || tok == "" {
			t.Fatalf("token: %d %q", code, tok)
		}
		return tok
	}
	tok := token(base)
	tests := []struct {
		name   string
		method string
		url    string
		hdr    map[string]string
		want   int
	}{
		{"token without ttl", http.MethodPut, base + "/latest/api/token", nil, http.StatusBadRequest},
		{"token ttl 0", http.MethodPut, base + "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "0"}, http.StatusBadRequest},
		{"token ttl too long", http.MethodPut, base + "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21601"}, http.StatusBadRequest},
		{"token through a proxy", http.MethodPut, base + "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"}, http.StatusForbidden},
		{"IMDSv1 request", http.MethodGet, base + "/latest/meta-data/instance-id", nil, http.StatusUnauthorized},
		{"forged token", http.MethodGet, base + "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": "forged"}, http.StatusUnauthorized},
		{"valid token", http.MethodGet, base + "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": tok}, http.StatusOK},
		{"token of another instance", http.MethodGet, gone + "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": tok}, http.StatusUnauthorized},
		{"unknown instance", http.MethodGet, gone + "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": token(gone)}, http.StatusNotFound},
		{"path outside latest", http.MethodGet, base + "/2009-04-04/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": tok}, http.StatusNotFound},
		{"write to metadata", http.MethodPost, base + "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": tok}, http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		if code, body := do(tc.method, tc.url, tc.hdr); code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, strings.TrimSpace(body), tc.want)
		}
	}
}

// TestBlockDeviceMapping: block-device-mapping/ is the instance's volumes as of its last start, as on EC2: ami,
// one ebsN per volume attached then answering its device name without /dev/, and root. A volume attached while it
// runs is not listed until it is stopped and started; one detached stays listed until the next start.
func TestBlockDeviceMapping(t *testing.T) {
	e := startCloud(t)
	ctx := context.Background()
	c := e.EC2(t)
	meta := imds.New(imds.Options{Endpoint: e.IMDS(t, fakecloudtest.InstanceA)})
	other := imds.New(imds.Options{Endpoint: e.IMDS(t, fakecloudtest.InstanceB)})
	get := func(client *imds.Client, path string) (string, int) {
		t.Helper()
		out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) {
			return "", re.HTTPStatusCode()
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(out.Content)
		return string(body), http.StatusOK
	}
	volume := func() string {
		out, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.VolumeId)
	}
	waitVolume := func(id string, want types.VolumeState) {
		fakecloudtest.WaitFor(t, 10*time.Second, string(want)+" "+id, func(ctx context.Context) (bool, error) {
			out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
			return err == nil && out.Volumes[0].State == want && (want != types.VolumeStateInUse ||
				out.Volumes[0].Attachments[0].State == types.VolumeAttachmentStateAttached), err
		})
	}
	attach := func(id, device string) {
		waitVolume(id, types.VolumeStateAvailable)
		if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &id, InstanceId: aws.String(fakecloudtest.InstanceA), Device: &device}); err != nil {
			t.Fatal(err)
		}
		waitVolume(id, types.VolumeStateInUse)
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		for path, body := range want {
			status := http.StatusOK
			if body == "" {
				status = http.StatusNotFound
			}
			if got, gotStatus := get(meta, path); got != body || gotStatus != status {
				t.Errorf("%s: %s = %d %q, want %d %q", when, path, gotStatus, got, status, body)
			}
		}
	}
	first, second := volume(), volume()
	attach(first, "/dev/xvdba")
	attach(second, "/dev/sdf")
	check("attached while running", map[string]string{"block-device-mapping/": "ami\nroot", "block-device-mapping/ebs1": ""})

	e.RestartInstance(t, fakecloudtest.InstanceA)
	check("after a start", map[string]string{
		"block-device-mapping/":      "ami\nebs1\nebs2\nroot",
		"block-device-mapping/ebs1":  "xvdba",
		"block-device-mapping/ebs2":  "sdf",
		"block-device-mapping/root":  "/dev/xvda",
		"block-device-mapping/ami":   "/dev/xvda",
		"block-device-mapping/ebs3":  "",
		"block-device-mapping/ebs0":  "",
		"block-device-mapping/ebs01": "",
		"block-device-mapping/ebs":   "",
	})
	if got, _ := get(other, "block-device-mapping/"); got != "ami\nroot" {
		t.Errorf("another instance's block-device-mapping/ = %q, want ami and root only", got)
	}

	if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &first}); err != nil {
		t.Fatal(err)
	}
	waitVolume(first, types.VolumeStateAvailable)
	check("detached while running", map[string]string{"block-device-mapping/": "ami\nebs1\nebs2\nroot", "block-device-mapping/ebs1": "xvdba"})

	e.RestartInstance(t, fakecloudtest.InstanceA)
	check("after the next start", map[string]string{"block-device-mapping/": "ami\nebs1\nroot", "block-device-mapping/ebs1": "sdf",
		"block-device-mapping/ebs2": ""})
}
