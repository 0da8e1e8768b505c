package ec2model

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// element is a parsed XML element: its local name, text and children in order.
type element struct {
	name     string
	text     string
	children []*element
}

func parseXML(body []byte) (*element, error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	var stack []*element
	var root *element
	for {
		tok, err := d.Token()
		if err != nil {
			if root != nil && len(stack) == 0 {
				return root, nil
			}
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			e := &element{name: t.Name.Local}
			if len(stack) > 0 {
				parent := stack[len(stack)-1]
				parent.children = append(parent.children, e)
			} else if root != nil {
				return nil, fmt.Errorf("a second root element %s", t.Name.Local)
			} else {
				root = e
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(t)
			}
		}
	}
}

// replyMeta are the elements every ec2 protocol reply may carry beside its output shape's members: requestId,
// and return, which EC2 sends for actions whose model has no output ("<return>true</return>").
var replyMeta = map[string]string{"requestId": "", "return": "boolean"}

// CheckReply checks a successful reply's body against the action's output shape: the root is
// <ActionResponse>, every element below is a member of its shape spelled as the model spells it, with a value of
// its type, and every required member is there.
func (m *Model) CheckReply(action string, body []byte) []Mismatch {
	op, ok := m.operations[action]
	if !ok {
		return []Mismatch{{Action: action, What: "the model has no such operation"}}
	}
	c := &checker{m: m, action: action}
	root, err := parseXML(body)
	if err != nil {
		c.add("", "the reply is not XML: %v", err)
		return c.out
	}
	if root.name != action+"Response" {
		c.add(root.name, "the root element must be %sResponse", action)
		return c.out
	}
	var members []*element
	for _, e := range root.children {
		kind, meta := replyMeta[e.name]
		switch {
		case !meta:
			members = append(members, e)
		case kind == "boolean" && op.Output == nil:
			c.scalar(e.name, "Boolean", &shape{Type: "boolean"}, strings.TrimSpace(e.text))
		case kind == "boolean":
			members = append(members, e) // a member of the output shape when it has one
		}
	}
	if op.Output == nil {
		for _, e := range members {
			c.add(e.name, "the operation has no output: unknown element")
		}
		return c.out
	}
	c.structure(op.Output.Shape, op.Output.Shape, members)
	return c.out
}

// replyName is a member's element name in an ec2 protocol reply.
func replyName(name string, ref shapeRef) string {
	if ref.LocationName != "" {
		return ref.LocationName
	}
	return name
}

func (c *checker) structure(where, shapeName string, children []*element) {
	s := c.m.shapes[shapeName]
	byElement := map[string]string{}
	for name, ref := range s.Members {
		byElement[replyName(name, ref)] = name
	}
	seen := map[string]int{}
	for _, e := range children {
		name, ok := byElement[e.name]
		if !ok {
			c.addAbout(shapeName, e.name, where+"/"+e.name, "unknown element: not a member of %s", shapeName)
			continue
		}
		seen[name]++
		ref := s.Members[name]
		member := c.m.shapes[ref.Shape]
		if member.Type == "list" && member.Flattened {
			c.value(fmt.Sprintf("%s/%s[%d]", where, e.name, seen[name]), ref.Shape, e)
			continue
		}
		if seen[name] > 1 {
			c.add(where+"/"+e.name, "element repeated")
			continue
		}
		c.value(where+"/"+e.name, ref.Shape, e)
	}
	for _, req := range s.Required {
		if seen[req] == 0 {
			c.addAbout(shapeName, replyName(req, s.Members[req]), where+"/"+replyName(req, s.Members[req]), "required member of %s is missing", shapeName)
		}
	}
}

func (c *checker) value(where, shapeName string, e *element) {
	s := c.m.shapes[shapeName]
	switch s.Type {
	case "structure":
		if strings.TrimSpace(e.text) != "" {
			c.add(where, "%s is a structure, got text %q", shapeName, strings.TrimSpace(e.text))
		}
		c.structure(where, shapeName, e.children)
	case "list":
		if s.Flattened {
			c.value(where, s.Member.Shape, e)
			return
		}
		item := replyName("member", *s.Member)
		for i, child := range e.children {
			at := where + "/" + child.name + "[" + strconv.Itoa(i+1) + "]"
			if child.name != item {
				c.add(at, "a list element of %s must be <%s>", shapeName, item)
				continue
			}
			c.value(at, s.Member.Shape, child)
		}
	default:
		if len(e.children) > 0 {
			c.add(where, "%s is a %s, got child element <%s>", shapeName, s.Type, e.children[0].name)
			return
		}
		c.scalar(where, shapeName, s, e.text)
	}
}
