package instancetypes

import "strings"

// How Resolve found a type's row.
const (
	// FromTable: the type is in the table.
	FromTable = "table"
	// FromFamily: the type is not, but its family is: the row is the family's most restrictive known size.
	FromFamily = "family"
	// FromDefault: neither is (or no type was named): the row is the Default type's, a shared Nitro limit.
	FromDefault = "default"
)

// Resolve returns the row to count an instance type by, and how it was found. A type missing from the table
// (a size or family newer than it) takes the lowest limit among its family's known sizes, so that a node
// does not report more slots than it has; a type of an unknown family takes the Default type's row. The row keeps the name asked for.
func Resolve(name string) (Info, string) {
	if info, ok := Lookup(name); ok {
		return info, FromTable
	}
	family, _, _ := strings.Cut(name, ".")
	var best Info
	found := false
	for _, n := range table.names {
		f, _, _ := strings.Cut(n, ".")
		if f != family || name == "" {
			continue
		}
		info := table.byName[n]
		if !found || info.VolumeLimit() < best.VolumeLimit() {
			best, found = info, true
		}
	}
	how := FromFamily
	if !found {
		best, _ = Lookup(Default)
		how = FromDefault
	}
	best.Name = name
	return best, how
}
