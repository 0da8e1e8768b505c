package api

import "github.com/diskforge/diskforge/pkg/fakecloud/state"

type tagDescriptionXML struct {
	Key          string `xml:"key"`
	ResourceID   string `xml:"resourceId"`
	ResourceType string `xml:"resourceType"`
	Value        string `xml:"value"`
}

type describeTagsResponse struct {
	meta
	Tags      []tagDescriptionXML `xml:"tagSet>item"`
	NextToken string              `xml:"nextToken,omitempty"`
}

func (h *Handler) describeTags(p *params) (response, error) {
	in := state.DescribeInput{Filters: p.filters(), Page: state.Page{MaxResults: p.int32p("MaxResults"), NextToken: p.str("NextToken")}}
	if p.err != nil {
		return nil, p.err
	}
	tags, next, err := h.state.DescribeTags(in)
	if err != nil {
		return nil, err
	}
	out := &describeTagsResponse{Tags: make([]tagDescriptionXML, len(tags)), NextToken: next}
	for i, t := range tags {
		out.Tags[i] = tagDescriptionXML{Key: t.Key, ResourceID: t.ResourceID, ResourceType: t.ResourceType, Value: t.Value}
	}
	return out, nil
}
