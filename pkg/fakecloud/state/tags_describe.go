package state

import (
	"slices"
	"time"
)

// TagDescription is one tag of one resource, as DescribeTags lists it.
type TagDescription struct {
	ResourceID, ResourceType, Key, Value string
}

// tagRow is a TagDescription with the whole tag set of its resource, for the tag:KEY filters, which select
// resources.
type tagRow struct {
	TagDescription
	all []Tag
}

// EC2 documents MaxResults 5–1000 for DescribeTags.
var tagPages = pageLimits{min: 5, max: 1000}

var tagFields = fields[tagRow]{
	"key":           func(r *tagRow) []string { return []string{r.Key} },
	"value":         func(r *tagRow) []string { return []string{r.Value} },
	"resource-id":   func(r *tagRow) []string { return []string{r.ResourceID} },
	"resource-type": func(r *tagRow) []string { return []string{r.ResourceType} },
}

// DescribeTags lists the tags of volumes, snapshots and instances by filter, in order of resource ID and key,
// a page at a time.
func (s *State) DescribeTags(in DescribeInput) ([]TagDescription, string, error) {
	var (
		out  []TagDescription
		next string
		err  error
	)
	s.read(func(time.Time) {
		var match func(*tagRow) bool
		if match, err = tagFields.compile(in.Filters, func(r *tagRow) []Tag { return r.all }); err != nil {
			return
		}
		rows := map[string]*tagRow{}
		add := func(id, resourceType string, tags []Tag) {
			for _, t := range tags {
				// A resource ID has no NUL: the key orders rows by resource, then tag key.
				rows[id+"\x00"+t.Key] = &tagRow{TagDescription{id, resourceType, t.Key, t.Value}, tags}
			}
		}
		for id, v := range s.volumes {
			add(id, "volume", v.Tags)
		}
		for id, sn := range s.snapshots {
			add(id, "snapshot", sn.Tags)
		}
		for id, inst := range s.instances {
			add(id, "instance", inst.Tags)
		}
		keys := make([]string, 0, len(rows))
		for k := range rows {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		index := idIndex{ids: keys}
		var page []string
		page, next, err = tagPages.page(&index, in.Page, false, func(k string) bool { return match(rows[k]) })
		for _, k := range page {
			out = append(out, rows[k].TagDescription)
		}
	})
	return out, next, err
}
