// Package ec2model checks EC2 Query traffic against EC2's published service model (botocore's
// data/ec2/2016-11-15/service-2.json), so that fakecloud's requests and replies are held to what real clients
// are built from rather than to lists someone wrote by hand.
//
// Invariants a reader can check against the code:
//   - A request parameter is accepted only if it names a path through the operation's input shape under the ec2
//     protocol's serialization (botocore's EC2Serializer): a member is spelled by its queryName, else its
//     locationName with the first letter upper-cased, else its member name; a list adds ".N" (N from 1) per
//     element, whatever the list member's own locationName.
//   - A reply element is accepted only if it is a member of the output shape under the ec2 protocol's parsing
//     (botocore's EC2 XML parser): a member is the element named by its locationName, else its member name; a
//     list is that element holding one child per element, named by the list member's locationName, else
//     "member" (flattened lists, which EC2's model has none of, repeat the member element instead).
//   - Scalars must parse as their shape's type (boolean true/false, integer, long, float, double, ISO 8601
//     timestamp, base64 blob) and strings with an enum must be one of its values; required members must be
//     present.
//
// The package never reads EC2 knowledge from anywhere but the model file it is given.
package ec2model

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
)

// Model is an EC2 service model.
type Model struct {
	// Path is the file it was read from.
	Path       string
	APIVersion string
	Protocol   string
	operations map[string]operation
	shapes     map[string]*shape
}

type operation struct {
	Name   string    `json:"name"`
	Input  *shapeRef `json:"input"`
	Output *shapeRef `json:"output"`
}

type shapeRef struct {
	Shape        string `json:"shape"`
	LocationName string `json:"locationName"`
	QueryName    string `json:"queryName"`
	// Documentation is the member's HTML doc: for a Filters member, the list of filter names.
	Documentation string `json:"documentation"`
}

type shape struct {
	Type      string              `json:"type"`
	Members   map[string]shapeRef `json:"members"`
	Member    *shapeRef           `json:"member"`
	Required  []string            `json:"required"`
	Enum      []string            `json:"enum"`
	Flattened bool                `json:"flattened"`
}

// Parse reads a service model, plain JSON or gzip-compressed (botocore ships either).
func Parse(data []byte) (*Model, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("service model: %w", err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("service model: %w", err)
		}
	}
	var raw struct {
		Metadata struct {
			APIVersion string `json:"apiVersion"`
			Protocol   string `json:"protocol"`
		} `json:"metadata"`
		Operations map[string]operation `json:"operations"`
		Shapes     map[string]*shape    `json:"shapes"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("service model: %w", err)
	}
	if len(raw.Operations) == 0 {
		return nil, fmt.Errorf("service model: no operations")
	}
	m := &Model{APIVersion: raw.Metadata.APIVersion, Protocol: raw.Metadata.Protocol, operations: raw.Operations, shapes: raw.Shapes}
	// A reference to a shape the model lacks would make the checks pass on anything under it.
	for name, s := range m.shapes {
		refs := []*shapeRef{s.Member}
		for _, r := range s.Members {
			refs = append(refs, &r)
		}
		for _, r := range refs {
			if r != nil && m.shapes[r.Shape] == nil {
				return nil, fmt.Errorf("service model: shape %s refers to unknown shape %s", name, r.Shape)
			}
		}
	}
	for name, op := range m.operations {
		for _, r := range []*shapeRef{op.Input, op.Output} {
			if r != nil && m.shapes[r.Shape] == nil {
				return nil, fmt.Errorf("service model: operation %s refers to unknown shape %s", name, r.Shape)
			}
		}
	}
	return m, nil
}

// Load reads the model at path.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Path = path
	return m, nil
}

// HasOperation reports whether the model defines the action.
func (m *Model) HasOperation(action string) bool {
	_, ok := m.operations[action]
	return ok
}

// filterName is a filter's name as the model's docs list it: <li><p><code>NAME</code>.
var filterName = regexp.MustCompile(`<li>\s*<p>\s*<code>([^<]+)</code>`)

// FilterNames lists the filters the model's docs give for an action's Filters member, in their order; none
// when the action has no such member. A name with a placeholder (tag:<key>) is listed as the docs write it.
func (m *Model) FilterNames(action string) []string {
	op, ok := m.operations[action]
	if !ok || op.Input == nil {
		return nil
	}
	var out []string
	for name, ref := range m.shapes[op.Input.Shape].Members {
		if name != "Filters" && name != "Filter" {
			continue
		}
		for _, match := range filterName.FindAllStringSubmatch(ref.Documentation, -1) {
			out = append(out, html.UnescapeString(match[1]))
		}
	}
	return out
}

// Operations lists the model's actions, sorted.
func (m *Model) Operations() []string { return slices.Sorted(maps.Keys(m.operations)) }
