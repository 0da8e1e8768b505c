package ec2cloud

import (
	"encoding/base64"
	"encoding/json"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// EC2 refuses MaxResults below 5, while CSI callers may ask for pages of 1. Pages are therefore fetched at
// least minPageSize long and cut to size; the token handed out names the EC2 page and how many of its items
// were already returned, so the next call resumes exactly there.
const minPageSize = 5

type pageToken struct {
	EC2  string `json:"t,omitempty"`
	Skip int    `json:"s,omitempty"`
}

func (t pageToken) encode() string {
	if t == (pageToken{}) {
		return ""
	}
	raw, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func decodePageToken(s string) (pageToken, error) {
	var t pageToken
	if s == "" {
		return t, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(raw, &t)
	}
	if err != nil || t.Skip < 0 {
		return pageToken{}, newError("list", cloud.ErrInvalidArgument, "invalid page token %q", s)
	}
	return t, nil
}

// listPage returns one page of a listing. fetch gets the EC2 token and page size (nil: the cloud's choice).
func listPage[T any](req cloud.PageRequest, fetch func(ec2Token string, maxResults *int32) ([]T, string, error)) ([]T, string, error) {
	if req.MaxResults < 0 {
		return nil, "", newError("list", cloud.ErrInvalidArgument, "negative page size %d", req.MaxResults)
	}
	tok, err := decodePageToken(req.NextToken)
	if err != nil {
		return nil, "", err
	}
	var size *int32
	if req.MaxResults > 0 {
		n := max(req.MaxResults, minPageSize)
		size = &n
	}
	items, next, err := fetch(tok.EC2, size)
	if err != nil {
		return nil, "", err
	}
	items = items[min(tok.Skip, len(items)):]
	if req.MaxResults > 0 && len(items) > int(req.MaxResults) {
		return items[:req.MaxResults], pageToken{EC2: tok.EC2, Skip: tok.Skip + int(req.MaxResults)}.encode(), nil
	}
	return items, pageToken{EC2: next}.encode(), nil
}
