package ec2model

import (
	"bytes"
	"compress/gzip"
	"net/url"
	"strings"
	"testing"
)

// tinyModel is a slice of EC2's model in its own spelling: a request with a queryName, a locationName, a list
// of structures and a required member; a reply with a list of structures, a timestamp, a boolean, an integer
// and an enum.
const tinyModel = `{
 "metadata": {"apiVersion": "2016-11-15", "protocol": "ec2"},
 "operations": {
  "DescribeThings": {"name": "DescribeThings", "input": {"shape": "DescribeThingsRequest"}, "output": {"shape": "DescribeThingsResult"}},
  "DeleteThing": {"name": "DeleteThing", "input": {"shape": "DeleteThingRequest"}}
 },
 "shapes": {
  "DescribeThingsRequest": {"type": "structure", "required": ["Zone"], "members": {
   "Zone": {"shape": "String"},
   "ThingIds": {"shape": "StringList", "locationName": "ThingId"},
   "Filters": {"shape": "FilterList", "locationName": "Filter"},
   "DryRun": {"shape": "Boolean", "locationName": "dryRun"},
   "MaxResults": {"shape": "Integer", "queryName": "MaxItems", "locationName": "maxResults"}
  }},
  "DeleteThingRequest": {"type": "structure", "members": {"ThingId": {"shape": "String"}}},
  "Filter": {"type": "structure", "members": {"Name": {"shape": "String"}, "Values": {"shape": "StringList", "locationName": "Value"}}},
  "FilterList": {"type": "list", "member": {"shape": "Filter", "locationName": "Filter"}},
  "StringList": {"type": "list", "member": {"shape": "String", "locationName": "item"}},
  "DescribeThingsResult": {"type": "structure", "members": {
   "Things": {"shape": "ThingList", "locationName": "thingSet"},
   "NextToken": {"shape": "String", "locationName": "nextToken"}
  }},
  "ThingList": {"type": "list", "member": {"shape": "Thing", "locationName": "item"}},
  "Thing": {"type": "structure", "required": ["ThingId"], "members": {
   "ThingId": {"shape": "String", "locationName": "thingId"},
   "CreateTime": {"shape": "DateTime", "locationName": "createTime"},
   "Encrypted": {"shape": "Boolean", "locationName": "encrypted"},
   "Size": {"shape": "Integer", "locationName": "size"},
   "State": {"shape": "ThingState", "locationName": "status"}
  }},
  "ThingState": {"type": "string", "enum": ["creating", "available"]},
  "String": {"type": "string"},
  "Boolean": {"type": "boolean"},
  "Integer": {"type": "integer"},
  "DateTime": {"type": "timestamp"}
 }
}`

func tiny(t *testing.T) *Model {
	t.Helper()
	m, err := Parse([]byte(tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func form(t *testing.T, q string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantMismatches checks that got holds exactly one mismatch per want, each naming where and containing what.
func wantMismatches(t *testing.T, got []Mismatch, want [][2]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d mismatches %v, want %d %v", len(got), got, len(want), want)
	}
	for i, w := range want {
		if got[i].Where != w[0] || !strings.Contains(got[i].What, w[1]) {
			t.Errorf("mismatch %d is %q, want at %q containing %q", i, got[i], w[0], w[1])
		}
	}
}

func TestCheckRequest(t *testing.T) {
	m := tiny(t)
	const ok = "Action=DescribeThings&Version=2016-11-15&Zone=z&ThingId.1=a&ThingId.2=b&Filter.1.Name=n&Filter.1.Value.1=v&DryRun=true&MaxItems=5"
	tests := []struct {
		name, action, query string
		want                [][2]string
	}{
		{"valid", "DescribeThings", ok, nil},
		{"unknown parameter", "DescribeThings", ok + "&Colour=red", [][2]string{{"Colour", "not a member of DescribeThingsRequest"}}},
		{"member name where locationName rules", "DescribeThings", ok + "&ThingIds.3=c", [][2]string{{"ThingIds", "not a member"}}},
		{"locationName where queryName rules", "DescribeThings", ok + "&MaxResults=5", [][2]string{{"MaxResults", "not a member"}}},
		{"unknown member of a list element", "DescribeThings", ok + "&Filter.1.Key=k", [][2]string{{"Filter.1.Key", "not a member of Filter"}}},
		{"list sent as a value", "DescribeThings", ok + "&Filter=x", [][2]string{{"Filter", "is a list, sent as a value"}}},
		{"list index zero", "DescribeThings", ok + "&ThingId.0=x", [][2]string{{"ThingId.0", "list index"}}},
		{"wrong boolean", "DescribeThings", strings.Replace(ok, "DryRun=true", "DryRun=yes", 1), [][2]string{{"DryRun", "not a valid boolean"}}},
		{"wrong integer", "DescribeThings", strings.Replace(ok, "MaxItems=5", "MaxItems=five", 1), [][2]string{{"MaxItems", "not a valid integer"}}},
		{"missing required member", "DescribeThings", strings.Replace(ok, "&Zone=z", "", 1), [][2]string{{"Zone", "required member"}}},
		{"scalar with members", "DeleteThing", "Action=DeleteThing&Version=2016-11-15&ThingId.1=a", [][2]string{{"ThingId", "with no members"}}},
		{"unknown action", "Frobnicate", "Action=Frobnicate", [][2]string{{"", "no such operation"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantMismatches(t, m.CheckRequest(tt.action, form(t, tt.query)), tt.want)
		})
	}
}

func TestCheckParamName(t *testing.T) {
	m := tiny(t)
	tests := []struct {
		name, param string
		want        [][2]string
	}{
		{"member", "Zone", nil},
		{"list element", "ThingId.1", nil},
		{"member of a list element", "Filter.1.Value.1", nil},
		{"unknown member", "Tag.1.Key", [][2]string{{"Tag", "not a member"}}},
		{"member name where locationName rules", "Filters.1.Name", [][2]string{{"Filters", "not a member"}}},
		{"list read without index", "Filter.Name", [][2]string{{"Filter.Name", "list index"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantMismatches(t, m.CheckParamName("DescribeThings", tt.param), tt.want)
		})
	}
}

func TestCheckReply(t *testing.T) {
	m := tiny(t)
	reply := func(thing string) string {
		return `<?xml version="1.0" encoding="UTF-8"?>
<DescribeThingsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>` +
			`<thingSet><item>` + thing + `</item></thingSet><nextToken>t</nextToken></DescribeThingsResponse>`
	}
	const thing = `<thingId>t-1</thingId><createTime>2026-01-02T03:04:05.000Z</createTime><encrypted>false</encrypted><size>8</size><status>available</status>`
	tests := []struct {
		name, action, body string
		want               [][2]string
	}{
		{"valid", "DescribeThings", reply(thing), nil},
		{"wrong element name", "DescribeThings", reply(strings.ReplaceAll(thing, "thingId", "ThingId") + "<thingId>t</thingId>"),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/ThingId", "unknown element"}}},
		{"member name where locationName rules", "DescribeThings", strings.ReplaceAll(reply(thing), "thingSet", "Things"),
			[][2]string{{"DescribeThingsResult/Things", "unknown element"}}},
		{"list element not item", "DescribeThings", strings.ReplaceAll(reply(thing), "item", "member"),
			[][2]string{{"DescribeThingsResult/thingSet/member[1]", "must be <item>"}}},
		{"wrong timestamp", "DescribeThings", reply(strings.Replace(thing, "2026-01-02T03:04:05.000Z", "1767323045", 1)),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/createTime", "not a valid timestamp"}}},
		{"wrong boolean", "DescribeThings", reply(strings.Replace(thing, "false", "False", 1)),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/encrypted", "not a valid boolean"}}},
		{"wrong integer", "DescribeThings", reply(strings.Replace(thing, "<size>8", "<size>8.5", 1)),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/size", "not a valid integer"}}},
		{"value outside the enum", "DescribeThings", reply(strings.Replace(thing, "available", "ready", 1)),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/status", "not one of ThingState's values"}}},
		{"missing required member", "DescribeThings", reply(strings.Replace(thing, "<thingId>t-1</thingId>", "", 1)),
			[][2]string{{"DescribeThingsResult/thingSet/item[1]/thingId", "required member"}}},
		{"repeated element", "DescribeThings", strings.Replace(reply(thing), "<nextToken>t</nextToken>", "<nextToken>t</nextToken><nextToken>u</nextToken>", 1),
			[][2]string{{"DescribeThingsResult/nextToken", "repeated"}}},
		{"wrong root", "DescribeThings", strings.ReplaceAll(reply(thing), "DescribeThingsResponse", "DescribeThingResponse"),
			[][2]string{{"DescribeThingResponse", "root element"}}},
		{"no output answers return", "DeleteThing", `<DeleteThingResponse><requestId>r</requestId><return>true</return></DeleteThingResponse>`, nil},
		{"no output and a stray element", "DeleteThing", `<DeleteThingResponse><requestId>r</requestId><return>true</return><thingId>t</thingId></DeleteThingResponse>`,
			[][2]string{{"thingId", "unknown element"}}},
		{"not XML", "DeleteThing", `<DeleteThingResponse>`, [][2]string{{"", "not XML"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantMismatches(t, m.CheckReply(tt.action, []byte(tt.body)), tt.want)
		})
	}
}

func TestParse(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(tinyModel))
	_ = zw.Close()
	m, err := Parse(gz.Bytes())
	if err != nil {
		t.Fatalf("gzip-compressed model: %v", err)
	}
	if got := m.Operations(); len(got) != 2 || !m.HasOperation("DeleteThing") {
		t.Errorf("operations %v", got)
	}
	broken := strings.Replace(tinyModel, `"member": {"shape": "Thing"`, `"member": {"shape": "Thingy"`, 1)
	if _, err := Parse([]byte(broken)); err == nil || !strings.Contains(err.Error(), "unknown shape Thingy") {
		t.Errorf("a model referring to a missing shape: err %v", err)
	}
}
