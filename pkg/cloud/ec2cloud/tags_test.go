package ec2cloud

import (
	"context"
	"errors"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

func TestTagDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{}, func(o *Options) { o.ExtraTags = map[string]string{"team": "storage"} })
	d := e.mustCreate(t, "pvc-tag", cloud.DiskOptions{SizeGiB: 1, Tags: map[string]string{"env": "dev", "team": "db"}})
	tests := []struct {
		name   string
		set    map[string]string
		remove []string
		err    error
		want   map[string]string
		gone   []string
	}{
		{name: "the class's tags win over extra tags", want: map[string]string{"team": "db", "env": "dev", cloud.TagName: "pvc-tag"}},
		{name: "set and overwrite", set: map[string]string{"env": "prod", "owner": "x"}, want: map[string]string{"env": "prod", "owner": "x"}},
		{name: "remove, also what is not there", remove: []string{"owner", "never"}, want: map[string]string{"env": "prod"}, gone: []string{"owner"}},
		{name: "both", set: map[string]string{"a": "1"}, remove: []string{"env"}, want: map[string]string{"a": "1"}, gone: []string{"env"}},
		{name: "the driver's own key", remove: []string{cloud.TagName}, err: cloud.ErrInvalidArgument, want: map[string]string{cloud.TagName: "pvc-tag"}},
		{name: "a cluster key", set: map[string]string{cloud.TagKubernetesClusterPrefix + "c": "owned"}, err: cloud.ErrInvalidArgument,
			gone: []string{cloud.TagKubernetesClusterPrefix + "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.set != nil || tt.remove != nil {
				if err := e.TagDisk(context.Background(), d.ID, tt.set, tt.remove); !errors.Is(err, tt.err) {
					t.Fatalf("TagDisk = %v, want %v", err, tt.err)
				}
			}
			tags := tagMap(e.rawVolume(t, d.ID).Tags)
			for k, v := range tt.want {
				if tags[k] != v {
					t.Errorf("tag %q = %q, want %q (all: %v)", k, tags[k], v, tags)
				}
			}
			for _, k := range tt.gone {
				if _, ok := tags[k]; ok {
					t.Errorf("tag %q still there (all: %v)", k, tags)
				}
			}
		})
	}
	if err := e.TagDisk(context.Background(), "vol-0123456789abcdef0", map[string]string{"a": "b"}, nil); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("tagging a missing volume: %v, want ErrNotFound", err)
	}
}

func TestExtraTagsRefuseOwnKeys(t *testing.T) {
	o := Options{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKeyID: "a", SecretAccessKey: "b",
		ExtraTags: map[string]string{cloud.TagClusterID: "x"}}
	if _, err := New(context.Background(), o); err == nil {
		t.Fatal("New accepted an extra tag the driver sets itself")
	}
}
