//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/diskforge/diskforge/test/e2e/cluster"
)

// Tags the driver sets from the provisioner's and snapshotter's --extra-create-metadata.
const (
	tagPVCName           = "kubernetes.io/created-for/pvc/name"
	tagPVCNamespace      = "kubernetes.io/created-for/pvc/namespace"
	tagSnapshotNamespace = "kubernetes.io/created-for/volumesnapshot/namespace"
)

// cloudClient reads fakecloud: GET /admin/volumes with the admin token, and DescribeSnapshots over the EC2 Query
// API, signed with SigV4 when keys are given (fakecloud checks signatures when it has keys, as the kind overlay's
// has).
type cloudClient struct {
	base  string
	http  *http.Client
	creds cluster.CloudCredentials
}

func newCloudClient(base string, creds cluster.CloudCredentials) *cloudClient {
	return &cloudClient{base: strings.TrimSuffix(base, "/"), http: &http.Client{Timeout: 15 * time.Second}, creds: creds}
}

// sign signs an EC2 Query request (its body is form) with the credentials, if any.
func (c *cloudClient) sign(ctx context.Context, req *http.Request, form string) error {
	if c.creds.AccessKeyID == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(form))
	return v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: c.creds.AccessKeyID, SecretAccessKey: c.creds.SecretAccessKey},
		req, hex.EncodeToString(sum[:]), "ec2", cloudRegion, time.Now())
}

// cloudRegion is the kind overlay's region (--region of fakecloud and the driver).
const cloudRegion = "us-east-1"

// cloudVolume is one volume of GET /admin/volumes.
type cloudVolume struct {
	ID             string            `json:"id"`
	Zone           string            `json:"zone"`
	Type           string            `json:"type"`
	SizeGiB        int32             `json:"sizeGiB"`
	Iops           int32             `json:"iops"`
	SnapshotID     string            `json:"snapshotId"`
	SourceVolumeID string            `json:"sourceVolumeId"`
	State          string            `json:"state"`
	Tags           []cloudTag        `json:"tags"`
	Attachments    []cloudAttachment `json:"attachments"`
}

type cloudTag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type cloudAttachment struct {
	InstanceID string `json:"instanceId"`
	Device     string `json:"device"`
	State      string `json:"state"`
	HostDevice string `json:"hostDevice"`
}

func (v cloudVolume) tag(key string) string {
	for _, t := range v.Tags {
		if t.Key == key {
			return t.Value
		}
	}
	return ""
}

func (v cloudVolume) String() string {
	var atts []string
	for _, a := range v.Attachments {
		atts = append(atts, fmt.Sprintf("%s:%s:%s", a.InstanceID, a.State, a.HostDevice))
	}
	return fmt.Sprintf("%s zone=%s size=%dGiB state=%s snapshot=%s pvc=%s/%s attachments=%v", v.ID, v.Zone,
		v.SizeGiB, v.State, v.SnapshotID, v.tag(tagPVCNamespace), v.tag(tagPVCName), atts)
}

func (c *cloudClient) volumes(ctx context.Context) ([]cloudVolume, error) {
	var vols []cloudVolume
	return vols, c.getJSON(ctx, "/admin/volumes", &vols)
}

// cloudInstance is one instance of GET /admin/instances.
type cloudInstance struct {
	ID              string `json:"id"`
	Zone            string `json:"zone"`
	InstanceType    string `json:"instanceType"`
	AttachmentLimit int    `json:"attachmentLimit"`
	State           string `json:"state"`
}

func (c *cloudClient) instance(ctx context.Context, id string) (cloudInstance, error) {
	var insts []cloudInstance
	if err := c.getJSON(ctx, "/admin/instances", &insts); err != nil {
		return cloudInstance{}, err
	}
	for _, i := range insts {
		if i.ID == id {
			return i, nil
		}
	}
	return cloudInstance{}, fmt.Errorf("no instance %s in /admin/instances", id)
}

// get GETs path with the admin token, if any, and returns the body of a 200 reply. A GET that got no reply is
// sent once more on a new connection: a kept-alive connection to the pod can be lost without a word (seen once,
// in S8, as a 15 s wait for the headers of /metrics), and a GET changes nothing.
func (c *cloudClient) get(ctx context.Context, path string) ([]byte, error) {
	out, err := c.admin(ctx, http.MethodGet, path, nil)
	var uerr *url.Error
	if errors.As(err, &uerr) && ctx.Err() == nil {
		c.http.CloseIdleConnections()
		return c.admin(ctx, http.MethodGet, path, nil)
	}
	return out, err
}

// putJSON PUTs body to an admin path and returns the body of a 200 reply.
func (c *cloudClient) putJSON(ctx context.Context, path string, body []byte) ([]byte, error) {
	return c.admin(ctx, http.MethodPut, path, body)
}

// admin sends a request to fakecloud's admin API with the admin token, if any, and returns the body of a 200 reply.
func (c *cloudClient) admin(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var in io.Reader
	if body != nil {
		in = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, in)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.creds.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.creds.AdminToken)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

func (c *cloudClient) getJSON(ctx context.Context, path string, out any) error {
	body, err := c.get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// requestCount is how many EC2 requests of action fakecloud answered with code (an EC2 error code, or "Success"; "" for any),
// from its /metrics counter diskforge_fakecloud_requests_total.
func (c *cloudClient) requestCount(ctx context.Context, action, code string) (float64, error) {
	body, err := c.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	const metric = "diskforge_fakecloud_requests_total{"
	var total float64
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, metric)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || !slices.Contains(strings.Split(labels, ","), fmt.Sprintf("action=%q", action)) ||
			(code != "" && !slices.Contains(strings.Split(labels, ","), fmt.Sprintf("code=%q", code))) {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}

func (c *cloudClient) volume(ctx context.Context, id string) (cloudVolume, bool, error) {
	vols, err := c.volumes(ctx)
	if err != nil {
		return cloudVolume{}, false, err
	}
	for _, v := range vols {
		if v.ID == id {
			return v, true, nil
		}
	}
	return cloudVolume{}, false, nil
}

// volumesOfNamespace are the volumes the provisioner created for PVCs of ns.
func (c *cloudClient) volumesOfNamespace(ctx context.Context, ns string) ([]cloudVolume, error) {
	vols, err := c.volumes(ctx)
	if err != nil {
		return nil, err
	}
	var out []cloudVolume
	for _, v := range vols {
		if v.tag(tagPVCNamespace) == ns {
			out = append(out, v)
		}
	}
	return out, nil
}

type cloudSnapshot struct {
	ID       string `xml:"snapshotId"`
	VolumeID string `xml:"volumeId"`
	Status   string `xml:"status"`
}

// snapshotsTagged lists the snapshots carrying tag key=value (DescribeSnapshots, all pages).
func (c *cloudClient) snapshotsTagged(ctx context.Context, key, value string) ([]cloudSnapshot, error) {
	var out []cloudSnapshot
	token := ""
	for {
		form := url.Values{"Action": {"DescribeSnapshots"}, "Version": {"2016-11-15"}, "Owner.1": {"self"},
			"Filter.1.Name": {"tag:" + key}, "Filter.1.Value.1": {value}}
		if token != "" {
			form.Set("NextToken", token)
		}
		payload := form.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/", strings.NewReader(payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		if err := c.sign(ctx, req, payload); err != nil {
			return nil, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("DescribeSnapshots: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		var page struct {
			Snapshots []cloudSnapshot `xml:"snapshotSet>item"`
			NextToken string          `xml:"nextToken"`
		}
		if err := xml.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("DescribeSnapshots: %w", err)
		}
		out = append(out, page.Snapshots...)
		if page.NextToken == "" {
			return out, nil
		}
		token = page.NextToken
	}
}
