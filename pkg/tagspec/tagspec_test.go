package tagspec

import (
	"errors"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	data := Data{PVCName: "ebs-claim", PVCNamespace: "ns-prod-abcdef", PVName: "pvc-1234",
		VolumeSnapshotName: "snap", VolumeSnapshotNamespace: "team-a", VolumeSnapshotContentName: "snapcontent-9"}
	tests := []struct {
		spec, wantKey, wantValue string
		wantErr                  bool
	}{
		{spec: "key1=value1", wantKey: "key1", wantValue: "value1"},
		{spec: " key2 = hello world ", wantKey: "key2", wantValue: "hello world"},
		{spec: "key3=", wantKey: "key3", wantValue: ""},
		{spec: "a=b=c", wantKey: "a", wantValue: "b=c"},
		{spec: "pvc={{ .PVCNamespace }}/{{ .PVCName }}", wantKey: "pvc", wantValue: "ns-prod-abcdef/ebs-claim"},
		{spec: "pv={{ .PVName }}", wantKey: "pv", wantValue: "pvc-1234"},
		{spec: "snap={{ .VolumeSnapshotNamespace }}/{{ .VolumeSnapshotName }}/{{ .VolumeSnapshotContentName }}", wantKey: "snap", wantValue: "team-a/snap/snapcontent-9"},
		{spec: `backup={{ .PVCNamespace | contains "prod" }}`, wantKey: "backup", wantValue: "true"},
		{spec: `billing={{ .PVCNamespace | field "-" 2 | toUpper }}`, wantKey: "billing", wantValue: "ABCDEF"},
		{spec: `short={{ .PVCName | substring 0 3 }}`, wantKey: "short", wantValue: "ebs"},
		{spec: `long={{ .PVCName | substring 4 99 | toLower }}`, wantKey: "long", wantValue: "claim"},
		{spec: `tier={{ if eq .PVCNamespace "x" }}gold{{ else }}bronze{{ end }}`, wantKey: "tier", wantValue: "bronze"},
		{spec: "missing={{ .Nope }}", wantErr: true},
		{spec: "unclosed={{ .PVCName", wantErr: true},
		{spec: `field={{ .PVCName | field "-" 5 }}`, wantErr: true},
		{spec: `sub={{ .PVCName | substring 5 2 }}`, wantErr: true},
		{spec: "loop={{ range 1000000000 }}x{{ end }}", wantErr: true},
		{spec: `big={{ printf "%999999999d" 1 }}`, wantErr: true},
		{spec: `nested={{ if true }}{{ print "x" }}{{ end }}`, wantErr: true},
		{spec: `chain={{ (printf "x") }}`, wantErr: true},
		{spec: `js={{ js .PVCName }}`, wantErr: true},
		{spec: `def={{ define "x" }}y{{ end }}z`, wantErr: true},
		{spec: `call={{ template "tag" }}`, wantErr: true},
		{spec: "k=" + strings.Repeat("v", 257), wantErr: true},
		{spec: "k={{ .PVCName }}" + strings.Repeat("v", 250), wantErr: true},
		{spec: strings.Repeat("k", 129) + "=v", wantErr: true},
		{spec: "aws:name=v", wantErr: true},
		{spec: "AWS:name=v", wantErr: true},
		{spec: "=v", wantErr: true},
		{spec: "novalue", wantErr: true},
		{spec: "k=\xff", wantErr: true},
	}
	for _, tt := range tests {
		k, v, err := Render(tt.spec, data)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Render(%q) = %q, %q, %v; want an ErrInvalid", tt.spec, k, v, err)
			}
			continue
		}
		if err != nil || k != tt.wantKey || v != tt.wantValue {
			t.Errorf("Render(%q) = %q, %q, %v; want %q, %q", tt.spec, k, v, err, tt.wantKey, tt.wantValue)
		}
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: "", want: map[string]string{}},
		{in: "team=storage", want: map[string]string{"team": "storage"}},
		{in: "team=storage, cost-center = 42 ,empty=", want: map[string]string{"team": "storage", "cost-center": "42", "empty": ""}},
		{in: "team", wantErr: true},
		{in: "team=a,", wantErr: true},
		{in: "aws:x=1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseList(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("ParseList(%q) = %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseList(%q)[%q] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}
