package fakecloud_test

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type errorEnvelope struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

func post(t *testing.T, env *fakecloudtest.Env, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(env.URL+"/", "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func TestProtocolErrors(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	cases := []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"no action", "Version=2016-11-15", 400, "MissingParameter", "Action"},
		{"unknown action", "Action=CreateVpc&Version=2016-11-15", 400, "InvalidAction", "CreateVpc"},
		{"size not a number", "Action=CreateVolume&Version=2016-11-15&Size=ten&AvailabilityZone=us-east-1a", 400, "InvalidParameterValue", "Size"},
		{"bool not a bool", "Action=CreateVolume&Version=2016-11-15&Size=1&AvailabilityZone=us-east-1a&Encrypted=maybe", 400, "InvalidParameterValue", "Encrypted"},
		{"size overflows", "Action=CreateVolume&Version=2016-11-15&Size=99999999999&AvailabilityZone=us-east-1a", 400, "InvalidParameterValue", "Size"},
		{"missing volume id", "Action=DeleteVolume&Version=2016-11-15", 400, "MissingParameter", "VolumeId"},
		{"attach without device", "Action=AttachVolume&VolumeId=vol-1&InstanceId=i-1&Version=2016-11-15", 400, "MissingParameter", "Device"},
		{"filter without name", "Action=DescribeVolumes&Filter.1.Value.1=x&Version=2016-11-15", 400, "MissingParameter", "Filter.1.Name"},
		{"tags without resources", "Action=CreateTags&Tag.1.Key=a&Tag.1.Value=b&Version=2016-11-15", 400, "MissingParameter", "resourceIdSet"},
		{"bad form", "Action=DescribeVolumes&%zz", 400, "InvalidParameterValue", "form"},
		{"dry run", "Action=DescribeAvailabilityZones&DryRun=false&Version=2016-11-15", 200, "", ""},
		// EC2 speaks one API version; clients that send another get the old or a future API, not this one.
		{"no version", "Action=DescribeVolumes", 400, "MissingParameter", "Version"},
		{"other version", "Action=DescribeVolumes&Version=2014-10-01", 400, "NoSuchVersion", "2014-10-01"},
		// List indexes outside 1…1000 are refused, not ignored (ignoring widens a filter to everything).
		{"filter index 0", "Action=DescribeVolumes&Version=2016-11-15&Filter.0.Name=volume-id&Filter.0.Value.1=vol-1", 400, "InvalidParameterValue", "Filter.0"},
		{"filter index too large", "Action=DescribeVolumes&Version=2016-11-15&Filter.99999.Name=volume-id&Filter.99999.Value.1=vol-1", 400, "InvalidParameterValue", "Filter.99999"},
		{"filter value index too large", "Action=DescribeVolumes&Version=2016-11-15&Filter.1.Name=volume-id&Filter.1.Value.1001=vol-1", 400, "InvalidParameterValue", "Filter.1.Value.1001"},
		{"id index too large", "Action=DescribeVolumes&Version=2016-11-15&VolumeId.1001=vol-0123456789abcdef0", 400, "InvalidParameterValue", "VolumeId.1001"},
		{"id index not a number", "Action=DescribeSnapshots&Version=2016-11-15&SnapshotId.x=snap-1", 400, "InvalidParameterValue", "SnapshotId.x"},
		// Malformed list keys are refused too: ignoring one would drop an ID or a filter and list everything.
		{"id index with a leading zero", "Action=DescribeVolumes&Version=2016-11-15&VolumeId.01=vol-0123456789abcdef0", 400, "InvalidParameterValue", "VolumeId.01"},
		{"id index with a sign", "Action=DescribeVolumes&Version=2016-11-15&VolumeId.%2B1=vol-0123456789abcdef0", 400, "InvalidParameterValue", "VolumeId.+1"},
		{"id with extra parts", "Action=DescribeVolumes&Version=2016-11-15&VolumeId.1.2.3=vol-0123456789abcdef0", 400, "UnknownParameter", "VolumeId.1.2.3"},
		{"id list without index", "Action=DescribeVolumes&Version=2016-11-15&VolumeId=vol-0123456789abcdef0", 400, "UnknownParameter", "VolumeId"},
		{"id list in another case", "Action=DescribeVolumes&Version=2016-11-15&volumeId.1=vol-0123456789abcdef0", 400, "UnknownParameter", "volumeId.1"},
		{"filter index with a leading zero", "Action=DescribeVolumes&Version=2016-11-15&Filter.01.Name=volume-id&Filter.01.Value.1=vol-1", 400, "InvalidParameterValue", "Filter.01"},
		{"filter with an unknown member", "Action=DescribeVolumes&Version=2016-11-15&Filter.1.Name=volume-id&Filter.1.Values.1=vol-1", 400, "UnknownParameter", "Filter.1.Values.1"},
		{"filter value without index", "Action=DescribeVolumes&Version=2016-11-15&Filter.1.Name=volume-id&Filter.1.Value=vol-1", 400, "UnknownParameter", "Filter.1.Value"},
		{"filter without members", "Action=DescribeVolumes&Version=2016-11-15&Filter.1=volume-id", 400, "UnknownParameter", "Filter.1"},
		{"owner with extra parts", "Action=DescribeSnapshots&Version=2016-11-15&Owner.1.x=self", 400, "UnknownParameter", "Owner.1.x"},
		{"tag index with a leading zero", "Action=CreateTags&Version=2016-11-15&ResourceId.1=vol-0123456789abcdef0&Tag.01.Key=a&Tag.01.Value=b", 400, "InvalidParameterValue", "Tag.01"},
		{"tag spec with an unknown member", "Action=CreateVolume&Version=2016-11-15&Size=1&AvailabilityZone=us-east-1a&TagSpecification.1.ResourceType=volume&TagSpecification.1.Tags.1.Key=a", 400, "UnknownParameter", "TagSpecification.1.Tags.1.Key"},
		// A list with a gap is read whole: the ID after the gap still counts.
		{"id list with a gap", "Action=DescribeVolumes&Version=2016-11-15&VolumeId.1=vol-0123456789abcdef0&VolumeId.3=vol-0123456789abcdef1", 400, "InvalidVolume.NotFound", "vol-0123456789abcdef1"},
		{"dry run delete", "Action=DeleteVolume&VolumeId=vol-0123456789abcdef0&DryRun=true&Version=2016-11-15", 400, "InvalidVolume.NotFound", "vol-0123456789abcdef0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, env, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d; body %s", status, tc.status, body)
			}
			if tc.code == "" {
				return
			}
			var env errorEnvelope
			if err := xml.Unmarshal([]byte(body), &env); err != nil {
				t.Fatalf("error body is not EC2's envelope: %v\n%s", err, body)
			}
			if env.Code != tc.code || !strings.Contains(env.Message, tc.msg) || env.RequestID == "" {
				t.Errorf("envelope = %+v, want code %s mentioning %q with a RequestID", env, tc.code, tc.msg)
			}
		})
	}
}

func TestSuccessReplyShape(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	status, body := post(t, env, url.Values{"Action": {"CreateVolume"}, "Version": {"2016-11-15"}, "Size": {"3"}, "AvailabilityZone": {"us-east-1a"}}.Encode())
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{`<CreateVolumeResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">`, "<requestId>", "<status>creating</status>", "<size>3</size>", "<volumeType>gp2</volumeType>", "<iops>100</iops>"} {
		if !strings.Contains(body, want) {
			t.Errorf("reply lacks %s:\n%s", want, body)
		}
	}
	var v struct {
		ID string `xml:"volumeId"`
	}
	_ = xml.Unmarshal([]byte(body), &v)
	_, body = post(t, env, "Action=DeleteVolume&Version=2016-11-15&VolumeId="+v.ID)
	if !strings.Contains(body, "<return>true</return>") {
		t.Errorf("DeleteVolume reply: %s", body)
	}
}

// FuzzQuery feeds arbitrary forms to every action: fakecloud must answer with an EC2 error or success, never a
// 500 or a panic.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{
		"Action=CreateVolume&Size=1&AvailabilityZone=us-east-1a",
		"Action=DescribeVolumes&Filter.1.Name=tag:a&Filter.1.Value.1=*&MaxResults=5",
		"Action=AttachVolume&VolumeId=vol-1&InstanceId=i-0a000000000000001&Device=/dev/xvdba",
		"Action=ModifyVolume&VolumeId=vol-1&Size=-5",
		"Action=DeleteTags&ResourceId.1=vol-x&Tag.1.Key=a",
		"Action=DescribeSnapshots&NextToken=zz&MaxResults=0",
		"Action=CreateSnapshot&VolumeId=vol-&TagSpecification.1.ResourceType=snapshot&TagSpecification.1.Tag.999999.Key=a",
		"Action=DescribeInstanceTypes&InstanceType.1=m5.large&Filter.1.Name=hypervisor&Filter.1.Value.1=nitro&DryRun=true",
		"Action=DescribeAvailabilityZones&ZoneName.0=us-east-1a",
	} {
		f.Add(seed + "&Version=2016-11-15")
	}
	env := fakecloudtest.Start(f, fakecloudtest.Options{})
	f.Fuzz(func(t *testing.T, body string) {
		resp, err := http.Post(env.URL+"/", "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		// A volume too large for the data directory's filesystem is EC2's capacity error, a 5xx by design.
		if resp.StatusCode >= 500 && !strings.Contains(string(raw), "<Code>InsufficientVolumeCapacity</Code>") {
			t.Errorf("status %d for %q: %s", resp.StatusCode, body, raw)
		}
	})
}

func TestSigV4(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{AccessKeys: map[string]string{fakecloudtest.AccessKeyID: fakecloudtest.SecretAccessKey}})
	ctx := context.Background()
	if _, err := env.EC2(t).DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}); err != nil {
		t.Fatalf("signed with the right key: %v", err)
	}
	cases := []struct {
		name  string
		creds aws.CredentialsProvider
		code  string
	}{
		{"wrong secret", credentials.NewStaticCredentialsProvider(fakecloudtest.AccessKeyID, "wrong", ""), "AuthFailure"},
		{"unknown key", credentials.NewStaticCredentialsProvider("AKIDUNKNOWN", "x", ""), "AuthFailure"},
		{"anonymous", aws.AnonymousCredentials{}, "MissingAuthenticationToken"},
	}
	for _, tc := range cases {
		c := env.EC2(t, func(o *ec2.Options) { o.Credentials = tc.creds })
		if _, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}); codeOf(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
}

func TestFaultInjection(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	ctx := context.Background()
	once := env.EC2(t, func(o *ec2.Options) { o.Retryer = retry.AddWithMaxAttempts(o.Retryer, 1) })
	set := func(cfg faults.Config) {
		t.Helper()
		if err := env.Server.Faults.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}

	set(faults.Config{RateLimit: faults.Limit{RequestsPerSecond: 0, Burst: 2}})
	var codes []string
	for range 3 {
		_, err := once.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
		codes = append(codes, codeOf(err))
	}
	if strings.Join(codes, ",") != ",,RequestLimitExceeded" {
		t.Errorf("burst of 2: codes %q", codes)
	}

	set(faults.Config{Errors: map[string]faults.ErrorFault{"DescribeVolumes": {Rate: 1, Code: "InternalError", Before: true}}})
	if _, err := once.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{}); codeOf(err) != "InternalError" {
		t.Errorf("error fault: err = %v", err)
	}

	set(faults.Config{Stuck: []string{state.TransitionAttach}})
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: aws.String(env.Instances[zoneA]), Device: aws.String("/dev/xvdbz")}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if v := describeVolume(t, c, vol); v.Attachments[0].State != "attaching" {
			t.Fatalf("stuck attach moved to %s", v.Attachments[0].State)
		}
	}
	// Lifting the fault through the admin endpoint lets the transition finish.
	req, _ := http.NewRequest(http.MethodPut, env.URL+"/admin/faults", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /admin/faults: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	waitAttachment(t, c, vol, "attached")
}

func TestAdminInstancesAndMetrics(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, env.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	node := "i-0dd0000000000000d"
	if status, body := do(http.MethodPut, "/admin/instances/"+node, `{"zone":"us-east-1b","attachmentLimit":3}`); status != 200 {
		t.Fatalf("register: %d %s", status, body)
	}
	if status, _ := do(http.MethodPut, "/admin/instances/i-0ee0000000000000e", `{"zone":"mars-1a"}`); status != 400 {
		t.Errorf("register in unknown zone: status %d", status)
	}
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneB)})
	attached(t, c, vol, node, "/dev/xvdba")
	if status, body := do(http.MethodDelete, "/admin/instances/"+node, ""); status != 200 {
		t.Fatalf("remove: %d %s", status, body)
	}
	waitDetached(t, c, vol)
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{node}}); codeOf(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("removed instance still described: %v", err)
	}
	if status, body := do(http.MethodGet, "/healthz", ""); status != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", status, body)
	}
	_, metrics := do(http.MethodGet, "/metrics", "")
	for _, want := range []string{`diskforge_fakecloud_requests_total{action="CreateVolume",code="Success"} 1`, `diskforge_fakecloud_request_duration_seconds_bucket{action="AttachVolume"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
