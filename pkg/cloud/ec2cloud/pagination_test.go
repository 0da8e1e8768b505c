package ec2cloud

import (
	"errors"
	"fmt"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// fakePages serves items in EC2 pages of the requested size (all at once when no size is given).
func fakePages(items []int) func(token string, size *int32) ([]int, string, error) {
	return func(token string, size *int32) ([]int, string, error) {
		start := 0
		if token != "" {
			if _, err := fmt.Sscanf(token, "at-%d", &start); err != nil {
				return nil, "", errors.New("bad token")
			}
		}
		if size != nil && *size < minPageSize {
			return nil, "", fmt.Errorf("page size %d below EC2's minimum", *size)
		}
		end := len(items)
		if size != nil {
			end = min(start+int(*size), len(items))
		}
		next := ""
		if end < len(items) {
			next = fmt.Sprintf("at-%d", end)
		}
		return items[start:end], next, nil
	}
}

// TestListPageSizes walks a listing with every page size, including those below EC2's minimum of 5, and
// checks every item comes exactly once, in order, in pages no longer than asked.
func TestListPageSizes(t *testing.T) {
	items := make([]int, 23)
	for i := range items {
		items[i] = i
	}
	fetch := fakePages(items)
	for size := int32(0); size <= 25; size++ {
		var got []int
		req := cloud.PageRequest{MaxResults: size}
		for pages := 0; ; pages++ {
			page, next, err := listPage(req, fetch)
			if err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			if size > 0 && len(page) > int(size) {
				t.Fatalf("size %d: page of %d", size, len(page))
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			if pages > 100 {
				t.Fatalf("size %d: no end", size)
			}
			req.NextToken = next
		}
		if fmt.Sprint(got) != fmt.Sprint(items) {
			t.Errorf("size %d: got %v", size, got)
		}
	}
}

func TestListPageBadRequests(t *testing.T) {
	fetch := fakePages([]int{1, 2, 3})
	for _, req := range []cloud.PageRequest{
		{NextToken: "not base64!"},
		{NextToken: "bm90IGpzb24"}, // "not json"
		{MaxResults: -1},
	} {
		if _, _, err := listPage(req, fetch); !errors.Is(err, cloud.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", req, err)
		}
	}
}
