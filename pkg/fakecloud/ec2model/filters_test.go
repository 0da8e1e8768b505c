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
}

// unmodelledPrefixes are whole families of filters on what fakecloud does not model.
var unmodelledPrefixes = map[string]map[string]string{}

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
		"DescribeTags", "DescribeAvailabilityZones", "DescribeFastSnapshotRestores", "DescribeLockedSnapshots", "DescribeSnapshotTierStatus"} {
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
