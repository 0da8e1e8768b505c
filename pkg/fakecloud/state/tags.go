package state

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// EC2's limits on tags: per resource, and the length of a key and of a value in characters.
const (
	maxTags        = 50
	maxTagKeyLen   = 128
	maxTagValueLen = 256
)

// validateTags checks tags given in one request: within EC2's limits, and no key twice (EC2 refuses that rather
// than keep either value).
func validateTags(tags []Tag) error {
	if len(tags) > maxTags {
		return ec2err.New(ec2err.CodeTagLimitExceeded, "The number of tags is %d; a resource can have at most %d tags.", len(tags), maxTags)
	}
	seen := make(map[string]bool, len(tags))
	for _, t := range tags {
		switch {
		case t.Key == "":
			return ec2err.InvalidValue("tag:key", "", "Tag keys must not be empty.")
		case utf8.RuneCountInString(t.Key) > maxTagKeyLen:
			return ec2err.InvalidValue("tag:key", t.Key, fmt.Sprintf("Tag keys must be at most %d characters.", maxTagKeyLen))
		case utf8.RuneCountInString(t.Value) > maxTagValueLen:
			return ec2err.InvalidValue("tag:value", t.Value, fmt.Sprintf("Tag values must be at most %d characters.", maxTagValueLen))
		case strings.HasPrefix(strings.ToLower(t.Key), "aws:"):
			return ec2err.InvalidValue("tag:key", t.Key, "Tag keys starting with 'aws:' are reserved for internal use.")
		case seen[t.Key]:
			return ec2err.New(ec2err.CodeInvalidParameterValue, "Duplicate tag key '%s' specified.", t.Key)
		}
		seen[t.Key] = true
	}
	return nil
}

// TagSelector names a tag to delete; a nil Value deletes whatever the value, a set one only a matching value.
type TagSelector struct {
	Key   string
	Value *string
}

// CreateTags adds or overwrites tags on volumes, snapshots and instances.
func (s *State) CreateTags(resourceIDs []string, tags []Tag, dryRun bool) error {
	return s.mutate(func(time.Time) error {
		if err := validateTags(tags); err != nil {
			return err
		}
		targets, err := s.taggables(resourceIDs)
		if err != nil {
			return err
		}
		if dryRun {
			return ec2err.DryRun()
		}
		for _, t := range targets {
			for _, tag := range tags {
				*t.tags = setTag(*t.tags, tag)
			}
			if len(*t.tags) > maxTags {
				return ec2err.New(ec2err.CodeTagLimitExceeded, "Resource %s would have more than %d tags.", t.id, maxTags)
			}
			s.markDirty(t.kind, t.id)
		}
		return nil
	})
}

// DeleteTags removes tags from volumes, snapshots and instances.
func (s *State) DeleteTags(resourceIDs []string, tags []TagSelector, dryRun bool) error {
	return s.mutate(func(time.Time) error {
		targets, err := s.taggables(resourceIDs)
		if err != nil {
			return err
		}
		if dryRun {
			return ec2err.DryRun()
		}
		for _, t := range targets {
			kept := (*t.tags)[:0]
			for _, have := range *t.tags {
				if !selected(tags, have) {
					kept = append(kept, have)
				}
			}
			*t.tags = kept
			s.markDirty(t.kind, t.id)
		}
		return nil
	})
}

// selected reports whether a tag is named by the selectors; no selectors select every tag, as on EC2.
func selected(sel []TagSelector, t Tag) bool {
	if len(sel) == 0 {
		return true
	}
	for _, s := range sel {
		if s.Key == t.Key && (s.Value == nil || *s.Value == t.Value) {
			return true
		}
	}
	return false
}

func setTag(tags []Tag, t Tag) []Tag {
	for i := range tags {
		if tags[i].Key == t.Key {
			tags[i].Value = t.Value
			return tags
		}
	}
	return append(tags, t)
}

type taggable struct {
	kind, id string
	tags     *[]Tag
}

func (s *State) taggables(ids []string) ([]taggable, error) {
	if len(ids) == 0 {
		return nil, ec2err.Missing("resourceIdSet")
	}
	out := make([]taggable, 0, len(ids))
	for _, id := range ids {
		prefix, _, _ := strings.Cut(id, "-")
		switch prefix {
		case "vol":
			v, err := s.volume(id)
			if err != nil {
				return nil, err
			}
			out = append(out, taggable{kindVolume, id, &v.Tags})
		case "snap":
			sn, ok := s.snapshots[id]
			if !ok {
				return nil, notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{id})
			}
			out = append(out, taggable{kindSnapshot, id, &sn.Tags})
		case "i":
			in, err := s.instance(id)
			if err != nil {
				return nil, err
			}
			out = append(out, taggable{kindInstance, id, &in.Tags})
		default:
			return nil, ec2err.New(ec2err.CodeInvalidID, "The ID '%s' is not valid", id)
		}
	}
	return out, nil
}
