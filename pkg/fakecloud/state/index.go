package state

import "sort"

// idIndex keeps IDs sorted so that listings page in a stable order while resources come and go.
type idIndex struct{ ids []string }

func (x *idIndex) insert(id string) {
	i := sort.SearchStrings(x.ids, id)
	if i < len(x.ids) && x.ids[i] == id {
		return
	}
	x.ids = append(x.ids, "")
	copy(x.ids[i+1:], x.ids[i:])
	x.ids[i] = id
}

func (x *idIndex) remove(id string) {
	i := sort.SearchStrings(x.ids, id)
	if i < len(x.ids) && x.ids[i] == id {
		x.ids = append(x.ids[:i], x.ids[i+1:]...)
	}
}

// from returns the IDs after token (all of them when token is empty).
func (x *idIndex) after(token string) []string {
	if token == "" {
		return x.ids
	}
	return x.ids[sort.Search(len(x.ids), func(i int) bool { return x.ids[i] > token }):]
}
