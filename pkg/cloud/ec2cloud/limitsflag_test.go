package ec2cloud

import (
	"reflect"
	"testing"
)

func TestParseRequestLimits(t *testing.T) {
	withDefaults := func(changes map[string]Limit) map[string]Limit {
		m := DefaultRequestLimits()
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		in      string
		want    PaceOptions
		wantErr bool
	}{
		{in: "", want: PaceOptions{Limits: DefaultRequestLimits()}},
		{in: " off ", want: PaceOptions{Off: true}},
		{in: "AttachVolume=20/200", want: PaceOptions{Limits: withDefaults(map[string]Limit{"AttachVolume": {20, 200}})}},
		{in: "CreateVolume=12.5/300, Describe*=40/200,*=10/100", want: PaceOptions{Limits: withDefaults(map[string]Limit{
			"CreateVolume": {12.5, 300}, limitDescribe: {40, 200}, limitOther: {10, 100}})}},
		{in: "DetachVolume=0/0", want: PaceOptions{Limits: withDefaults(map[string]Limit{"DetachVolume": {}})}},
		{in: "AttachVolume", wantErr: true},
		{in: "AttachVolume=20", wantErr: true},
		{in: "=20/200", wantErr: true},
		{in: "attachVolume=20/200", wantErr: true},
		{in: "Attach-Volume=20/200", wantErr: true},
		{in: "AttachVolume=-1/200", wantErr: true},
		{in: "AttachVolume=NaN/200", wantErr: true},
		{in: "AttachVolume=20/-5", wantErr: true},
		{in: "AttachVolume=20/1.5", wantErr: true},
		{in: "AttachVolume=0/50", wantErr: true},
		{in: "AttachVolume=1e9/50", wantErr: true},
		{in: "AttachVolume=20/200,", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseRequestLimits(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseRequestLimits(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRequestLimits(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
