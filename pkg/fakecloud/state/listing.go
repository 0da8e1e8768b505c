package state

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// pageLimits are the bounds EC2 puts on MaxResults for one kind of listing.
type pageLimits struct {
	min, max int32
	idsParam string
}

var (
	volumePages       = pageLimits{min: 5, max: 500, idsParam: "volumeIds"}
	snapshotPages     = pageLimits{min: 5, max: 1000, idsParam: "snapshotIds"}
	instancePages     = pageLimits{min: 5, max: 1000, idsParam: "instanceIds"}
	modificationPages = pageLimits{min: 1, max: 500, idsParam: "volumeIds"}
	typePages         = pageLimits{min: 5, max: 100, idsParam: "instanceTypes"}
	// EC2 documents 0–200 for DescribeFastSnapshotRestores, which takes no IDs.
	fastRestorePages = pageLimits{min: 0, max: 200}
	statusPages      = pageLimits{min: 5, max: 1000, idsParam: "volumeIds"}
)

// pageSize validates MaxResults: too small is refused, too large is clamped, absent means everything.
func (l pageLimits) pageSize(pg Page, withIDs bool) (int, error) {
	// Zero is "no limit given": some clients send it on every call.
	if pg.MaxResults == nil || *pg.MaxResults == 0 {
		return 0, nil
	}
	if withIDs {
		return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter %s cannot be used with the parameter maxResults", l.idsParam)
	}
	n := *pg.MaxResults
	if n < l.min {
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Value ( %d ) for parameter maxResults is invalid. Expecting a value greater than %d.", n, l.min)
	}
	return int(min(n, l.max)), nil
}

// page walks ids in order from the token, keeping those that match, until limit (0: no limit) are found. It
// returns the kept IDs and the token of the next page ("" on the last).
func (l pageLimits) page(ids *idIndex, pg Page, withIDs bool, match func(id string) bool) ([]string, string, error) {
	limit, err := l.pageSize(pg, withIDs)
	if err != nil {
		return nil, "", err
	}
	start, err := decodeToken(pg.NextToken)
	if err != nil {
		return nil, "", err
	}
	var out []string
	rest := ids.after(start)
	for i, id := range rest {
		if !match(id) {
			continue
		}
		out = append(out, id)
		if limit > 0 && len(out) == limit {
			if i+1 < len(rest) {
				return out, encodeToken(id), nil
			}
			break
		}
	}
	return out, "", nil
}

func encodeToken(lastID string) string { return base64.RawURLEncoding.EncodeToString([]byte(lastID)) }

func decodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.ContainsAny(string(raw), "-.") {
		return "", ec2err.New(ec2err.CodeInvalidPaginationToken, "The pagination token '%s' is invalid.", tok)
	}
	return string(raw), nil
}

// timeValues are the spellings a time filter matches: whole seconds, and with the milliseconds fakecloud
// displays, so the very value a client read back finds its record.
func timeValues(t time.Time) []string {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return []string{u.Format(time.RFC3339), u.Format("2006-01-02T15:04:05.000Z")}
}

// noValues is the field of an attribute no record has: its filter matches none.
func noValues[T any](*T) []string { return nil }

// fields maps a filter name to the values of a record it matches against.
type fields[T any] map[string]func(*T) []string

// compile turns filters into one predicate, refusing names EC2 would not know. Tag filters (tag:KEY, tag-key,
// tag-value) are understood for every resource through tags.
func (f fields[T]) compile(filters []Filter, tags func(*T) []Tag) (func(*T) bool, error) {
	type compiled struct {
		get    func(*T) []string
		values []string
	}
	var cs []compiled
	for _, flt := range filters {
		get, ok := f[flt.Name]
		switch {
		case ok:
		case strings.HasPrefix(flt.Name, "tag:") && len(flt.Name) > 4:
			key := flt.Name[4:]
			get = func(r *T) []string {
				for _, t := range tags(r) {
					if t.Key == key {
						return []string{t.Value}
					}
				}
				return nil
			}
		case flt.Name == "tag-key" || flt.Name == "tag-value":
			wantKey := flt.Name == "tag-key"
			get = func(r *T) []string {
				var out []string
				for _, t := range tags(r) {
					if wantKey {
						out = append(out, t.Key)
					} else {
						out = append(out, t.Value)
					}
				}
				return out
			}
		default:
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The filter '%s' is invalid", flt.Name)
		}
		if len(flt.Values) == 0 {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The filter '%s' has no values", flt.Name)
		}
		cs = append(cs, compiled{get: get, values: flt.Values})
	}
	return func(r *T) bool {
		for _, c := range cs {
			if !anyMatch(c.values, c.get(r)) {
				return false
			}
		}
		return true
	}, nil
}

func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if globMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// globMatch matches EC2 filter wildcards: * for any run, ? for one character.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// notFound reports missing IDs the way EC2 does: all of them, comma-separated, in one message.
func notFound(code, noun string, ids []string) error {
	return ec2err.New(code, "The %s '%s' does not exist.", noun, strings.Join(ids, ","))
}

func internal(err error) error { return ec2err.Internal(err) }
