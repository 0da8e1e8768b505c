package api

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// maxListItems bounds flattened lists, so a hostile request cannot make the decoder loop for long.
const maxListItems = 1000

// params decodes EC2 Query form values. The first decoding error sticks and later getters return zero values,
// so a handler decodes everything and checks err once.
type params struct {
	v   url.Values
	err error
	// read, when set, is told the name of every parameter the action reads (Options.ParamRead).
	read func(name string)
}

func (p *params) note(name string) {
	if p.read != nil {
		p.read(name)
	}
}

func (p *params) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *params) has(name string) bool {
	p.note(name)
	_, ok := p.v[name]
	return ok
}

func (p *params) str(name string) string {
	p.note(name)
	return p.v.Get(name)
}

func (p *params) required(name string) string {
	s := p.str(name)
	if s == "" {
		p.fail(ec2err.Missing(name))
	}
	return s
}

func (p *params) int32p(name string) *int32 {
	if !p.has(name) {
		return nil
	}
	raw := p.v.Get(name)
	n, err := strconv.ParseInt(raw, 10, 32)
	if err != nil {
		p.fail(ec2err.InvalidValue(name, raw, "Expecting an integer."))
		return nil
	}
	v := int32(n)
	return &v
}

func (p *params) boolp(name string) *bool {
	if !p.has(name) {
		return nil
	}
	raw := p.v.Get(name)
	b, err := strconv.ParseBool(raw)
	if err != nil {
		p.fail(ec2err.InvalidValue(name, raw, "Expecting true or false."))
		return nil
	}
	return &b
}

func (p *params) boolean(name string) bool {
	b := p.boolp(name)
	return b != nil && *b
}

// list reads a flattened list of values: prefix.1, prefix.2, … in index order.
func (p *params) list(prefix string) []string {
	var out []string
	for _, i := range p.indexes(prefix) {
		out = append(out, p.str(prefix+"."+strconv.Itoa(i)))
	}
	return out
}

// indexes returns, in order, the distinct N of a flattened list's keys: prefix.N for a list of values (no
// members), or prefix.N.MEMBER for a list of structures, where a member ending in "." is a nested list
// (MEMBER.M…, checked when it is read). Anything else under the prefix is refused, never ignored: an N outside
// 1…maxListItems, one with leading zeros or not a number; an unknown member or extra parts (VolumeId.1.2); the
// list's name alone, or in another case (volumeId.1). Ignoring such a key would drop an ID or a filter and widen
// the query to everything.
func (p *params) indexes(prefix string, members ...string) []int {
	if len(members) == 0 {
		p.note(prefix + ".1")
	}
	for _, m := range members {
		if list, ok := strings.CutSuffix(m, "."); ok {
			p.note(prefix + ".1." + list + ".1")
		} else {
			p.note(prefix + ".1." + m)
		}
	}
	seen := map[int]bool{}
	for k := range p.v {
		if len(k) < len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) {
			continue
		}
		rest, ok := strings.CutPrefix(k, prefix+".")
		switch {
		case len(k) > len(prefix) && k[len(prefix)] != '.':
			continue // another parameter that only starts alike (Tag, TagSpecification)
		case !ok:
			p.fail(unknownParameter(k))
			return nil
		}
		idx, member, nested := strings.Cut(rest, ".")
		i, err := strconv.Atoi(idx)
		if err != nil || idx != strconv.Itoa(i) || i < 1 || i > maxListItems {
			p.fail(ec2err.New(ec2err.CodeInvalidParameterValue,
				"The parameter %s has an invalid list index; indexes run from 1 to %d.", k, maxListItems))
			return nil
		}
		if nested != (len(members) > 0) || nested && !knownMember(member, members) {
			p.fail(unknownParameter(k))
			return nil
		}
		seen[i] = true
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// knownMember reports whether member (the part after prefix.N.) is one of members, or within a nested list
// member ("Value." admits Value.1, and Value alone, which the nested list then refuses).
func knownMember(member string, members []string) bool {
	for _, m := range members {
		if list, ok := strings.CutSuffix(m, "."); ok && (member == list || strings.HasPrefix(member, m)) || member == m {
			return true
		}
	}
	return false
}

func unknownParameter(name string) error {
	return ec2err.New(ec2err.CodeUnknownParameter, "The parameter %s is not recognized", name)
}

func (p *params) filters() []state.Filter {
	var out []state.Filter
	for _, i := range p.indexes("Filter", "Name", "Value.") {
		base := "Filter." + strconv.Itoa(i)
		name := p.str(base + ".Name")
		if name == "" {
			p.fail(ec2err.Missing(base + ".Name"))
			return nil
		}
		out = append(out, state.Filter{Name: name, Values: p.list(base + ".Value")})
	}
	return out
}

// tags reads prefix.N.Key / prefix.N.Value pairs.
func (p *params) tags(prefix string) []state.Tag {
	var out []state.Tag
	for _, i := range p.indexes(prefix, "Key", "Value") {
		base := prefix + "." + strconv.Itoa(i)
		out = append(out, state.Tag{Key: p.str(base + ".Key"), Value: p.str(base + ".Value")})
	}
	return out
}

// tagSelectors reads tags to delete, telling an absent value (any) from an empty one (only empty).
func (p *params) tagSelectors(prefix string) []state.TagSelector {
	var out []state.TagSelector
	for _, i := range p.indexes(prefix, "Key", "Value") {
		base := prefix + "." + strconv.Itoa(i)
		sel := state.TagSelector{Key: p.str(base + ".Key")}
		if p.has(base + ".Value") {
			v := p.str(base + ".Value")
			sel.Value = &v
		}
		out = append(out, sel)
	}
	return out
}

// tagSpecs reads TagSpecification.N for a resource type, refusing specifications for types the action does not
// create.
func (p *params) tagSpecs(resourceType string) []state.Tag {
	return p.tagSpecsOf(resourceType)[resourceType]
}

// tagSpecsOf reads TagSpecification.N for an action that creates resources of several types, by type.
func (p *params) tagSpecsOf(resourceTypes ...string) map[string][]state.Tag {
	out := map[string][]state.Tag{}
	for _, i := range p.indexes("TagSpecification", "ResourceType", "Tag.") {
		base := "TagSpecification." + strconv.Itoa(i)
		rt := p.str(base + ".ResourceType")
		if !slices.Contains(resourceTypes, rt) {
			p.fail(ec2err.InvalidValue("TagSpecification.ResourceType", rt, "The resource type must be '"+strings.Join(resourceTypes, "' or '")+"'."))
			return nil
		}
		tags := p.tags(base + ".Tag")
		if len(tags) == 0 {
			p.fail(ec2err.New(ec2err.CodeInvalidTagKeyMalformed, "Tag specification must have at least one tag"))
			return nil
		}
		out[rt] = append(out[rt], tags...)
	}
	return out
}

func (p *params) describe(idList string) state.DescribeInput {
	return state.DescribeInput{IDs: p.list(idList), Filters: p.filters(), Page: state.Page{MaxResults: p.int32p("MaxResults"), NextToken: p.str("NextToken")}}
}
