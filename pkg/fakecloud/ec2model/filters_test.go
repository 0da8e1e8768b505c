package ec2model_test

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// unmodelled are the filters EC2 documents for an action that fakecloud refuses, because it models nothing they
// could select by; every other documented filter must be accepted.
var unmodelled = map[string]map[string]string{
	"DescribeAvailabilityZones": {"group-long-name": "fakecloud shows no long group name"},
	"DescribeInstances": namesFor("fakecloud models no networking: no addresses, DNS names, subnets, VPCs or security groups",
		"dns-name", "ip-address", "ipv6-address", "private-dns-name", "private-ip-address", "source-dest-check", "subnet-id",
		"vpc-id", "instance.group-id", "instance.group-name", "requester-id", "key-name"),
	"DescribeImages": namesFor("fakecloud shows none of these image attributes",
		"free-tier-eligible", "image-allowed", "manifest-location", "sriov-net-support"),
}

// namesFor lists names under one reason.
func namesFor(reason string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[n] = reason
	}
	return out
}

// unmodelledPrefixes are whole families of filters on what fakecloud does not model.
var unmodelledPrefixes = map[string]map[string]string{
	"DescribeInstances": {
		"network-interface.":           "fakecloud models no network interfaces",
		"network-performance-options.": "fakecloud models no networking",
		"metadata-options.":            "the metadata service's options are not modelled",
		"capacity-reservation":         "fakecloud has no capacity reservations",
		"private-dns-name-options.":    "fakecloud models no DNS",
		"iam-instance-profile.":        "fakecloud has no IAM",
		"enclave-options.":             "fakecloud instances have no compute",
		"hibernation-options.":         "fakecloud instances have no compute",
		"maintenance-options.":         "fakecloud instances have no compute",
		"usage-operation":              "fakecloud has no billing",
		// One name each, but the same family of what an instance with no compute does not show.
		"affinity": "no dedicated hosts", "host-id": "no dedicated hosts", "placement-": "no placement groups",
		"boot-mode": "no firmware", "current-instance-boot-mode": "no firmware", "tpm-support": "no firmware",
		"ebs-optimized": "not shown", "ena-support": "not shown", "hypervisor": "not shown",
		"virtualization-type": "not shown", "monitoring-state": "no CloudWatch", "outpost-arn": "no Outposts",
		"platform-details": "no billing",
	},
}

func unmodelledReason(action, name string) string {
	if r := unmodelled[action][name]; r != "" {
		return r
	}
	for prefix, r := range unmodelledPrefixes[action] {
		if strings.HasPrefix(name, prefix) {
			return r
		}
	}
	return ""
}

// TestModelFilters: for each Describe action below, every filter EC2's model documents is accepted, and the
// ones listed as unmodelled are refused (so that the list stays true).
func TestModelFilters(t *testing.T) {
	found := fakecloudtest.LocateModel(t)
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	for _, action := range []string{"DescribeVolumes", "DescribeSnapshots", "DescribeVolumesModifications", "DescribeVolumeStatus",
		"DescribeTags", "DescribeAvailabilityZones", "DescribeFastSnapshotRestores", "DescribeLockedSnapshots", "DescribeSnapshotTierStatus",
		"DescribeInstances", "DescribeImages"} {
		names := found.Model.FilterNames(action)
		if len(names) == 0 {
			t.Errorf("%s: the model (%s) documents no filters", action, found.Package)
			continue
		}
		for _, name := range names {
			asked := name
			if asked == "tag" || strings.HasPrefix(asked, "tag:") {
				asked = "tag:Name" // tag:<key>, the docs' placeholder
			}
			code := filterAnswer(t, env.URL, action, asked)
			switch reason := unmodelledReason(action, name); {
			case reason == "" && code != "":
				t.Errorf("%s: documented filter %s refused (%s)", action, name, code)
			case reason != "" && code == "":
				t.Errorf("%s: filter %s accepted but listed as unmodelled (%s)", action, name, reason)
			}
		}
	}
}

// filterAnswer sends the action with one filter and returns the error code of the reply, "" on success.
func filterAnswer(t *testing.T, endpoint, action, filter string) string {
	t.Helper()
	form := url.Values{"Action": {action}, "Version": {"2016-11-15"}, "Filter.1.Name": {filter}, "Filter.1.Value.1": {"x"}}
	resp, err := http.PostForm(endpoint, form)
	if err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	var e struct {
		Code string `xml:"Errors>Error>Code"`
	}
	if err := xml.Unmarshal(body, &e); err != nil || e.Code == "" {
		t.Fatalf("%s filter %s: status %d, body %q", action, filter, resp.StatusCode, body)
	}
	return e.Code
}
