package ec2model

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mismatch is one place where traffic departs from the model.
type Mismatch struct {
	Action string
	// Where is the request parameter or the reply element's path (Volume/attachmentSet/item[1]/status).
	Where string
	What  string
	// Shape and Name, for what a newer model may have that this one lacks, are the shape and the member (its
	// parameter or element name) or enum value it lacks; empty otherwise.
	Shape, Name string
}

func (m Mismatch) String() string { return m.Action + " " + m.Where + ": " + m.What }

// queryParams are sent with every ec2 protocol request and belong to no input shape.
var queryParams = []string{"Action", "Version"}

// CheckRequest checks a request's form against the action's input shape: every parameter is a serialized
// member with a value of its type, and every required member is there.
func (m *Model) CheckRequest(action string, form url.Values) []Mismatch {
	op, ok := m.operations[action]
	if !ok {
		return []Mismatch{{Action: action, What: "the model has no such operation"}}
	}
	root := &paramNode{}
	for key, values := range form {
		if slices.Contains(queryParams, key) {
			continue
		}
		n := root
		for _, part := range strings.Split(key, ".") {
			if n.children == nil {
				n.children = map[string]*paramNode{}
			}
			child := n.children[part]
			if child == nil {
				child = &paramNode{}
				n.children[part] = child
			}
			n = child
		}
		n.values = append(n.values, values...)
		n.set = true
	}
	c := &checker{m: m, action: action}
	if op.Input == nil {
		if len(root.children) > 0 {
			c.add("", "the operation takes no input, got %s", strings.Join(sortedKeys(root.children), ", "))
		}
		return c.out
	}
	c.param("", op.Input.Shape, root)
	return c.out
}

// CheckParamName checks that name is a parameter the action's input shape can carry, whatever its value: it
// holds what fakecloud reads, not what a client sent.
func (m *Model) CheckParamName(action, name string) []Mismatch {
	op, ok := m.operations[action]
	if !ok {
		return []Mismatch{{Action: action, What: "the model has no such operation"}}
	}
	c := &checker{m: m, action: action}
	if op.Input == nil {
		c.add(name, "the operation takes no input")
		return c.out
	}
	shapeName, where := op.Input.Shape, ""
	for _, part := range strings.Split(name, ".") {
		s := m.shapes[shapeName]
		where = join(where, part)
		switch s.Type {
		case "structure":
			ref, ok := serializedMember(s, part)
			if !ok {
				c.addAbout(shapeName, part, where, "not a member of %s", shapeName)
				return c.out
			}
			shapeName = ref.Shape
		case "list":
			if n, err := strconv.Atoi(part); err != nil || n < 1 {
				c.add(where, "a list index must be a number from 1")
				return c.out
			}
			shapeName = s.Member.Shape
		default:
			c.add(where, "%s is a %s, with no members", shapeName, s.Type)
			return c.out
		}
	}
	return c.out
}

type paramNode struct {
	children map[string]*paramNode
	values   []string
	set      bool
}

type checker struct {
	m      *Model
	action string
	out    []Mismatch
}

func (c *checker) add(where, format string, args ...any) {
	c.addAbout("", "", where, format, args...)
}

// addAbout adds a mismatch about a member or enum value name the model's shape lacks.
func (c *checker) addAbout(shapeName, name, where, format string, args ...any) {
	c.out = append(c.out, Mismatch{Action: c.action, Where: where, What: fmt.Sprintf(format, args...), Shape: shapeName, Name: name})
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// querySerializedName is a member's parameter name under the ec2 protocol.
func querySerializedName(name string, ref shapeRef) string {
	switch {
	case ref.QueryName != "":
		return ref.QueryName
	case ref.LocationName != "":
		return strings.ToUpper(ref.LocationName[:1]) + ref.LocationName[1:]
	}
	return name
}

func serializedMember(s *shape, param string) (shapeRef, bool) {
	for name, ref := range s.Members {
		if querySerializedName(name, ref) == param {
			return ref, true
		}
	}
	return shapeRef{}, false
}

func (c *checker) param(where, shapeName string, n *paramNode) {
	s := c.m.shapes[shapeName]
	switch s.Type {
	case "structure":
		if n.set {
			c.add(where, "%s is a structure, sent as a value", shapeName)
		}
		for _, part := range sortedKeys(n.children) {
			ref, ok := serializedMember(s, part)
			if !ok {
				c.addAbout(shapeName, part, join(where, part), "not a member of %s", shapeName)
				continue
			}
			c.param(join(where, part), ref.Shape, n.children[part])
		}
		for _, req := range s.Required {
			if _, ok := n.children[querySerializedName(req, s.Members[req])]; !ok {
				name := querySerializedName(req, s.Members[req])
				c.addAbout(shapeName, name, join(where, name), "required member of %s is missing", shapeName)
			}
		}
	case "list":
		if n.set {
			c.add(where, "%s is a list, sent as a value (want %s.1, %s.2, …)", shapeName, where, where)
		}
		for _, part := range sortedKeys(n.children) {
			if i, err := strconv.Atoi(part); err != nil || i < 1 || part != strconv.Itoa(i) {
				c.add(join(where, part), "a list index must be a number from 1")
				continue
			}
			c.param(join(where, part), s.Member.Shape, n.children[part])
		}
	default:
		if len(n.children) > 0 {
			c.add(where, "%s is a %s, with no members (got %s)", shapeName, s.Type, strings.Join(sortedKeys(n.children), ", "))
		}
		if len(n.values) > 1 {
			c.add(where, "sent %d times", len(n.values))
		}
		for _, v := range n.values {
			c.scalar(where, shapeName, s, v)
		}
	}
}

// scalar checks a value's text against its shape's type.
func (c *checker) scalar(where, shapeName string, s *shape, text string) {
	var err error
	var enumValue string
	switch s.Type {
	case "boolean":
		if text != "true" && text != "false" {
			err = fmt.Errorf("want true or false")
		}
	case "integer":
		_, err = strconv.ParseInt(text, 10, 32)
	case "long":
		_, err = strconv.ParseInt(text, 10, 64)
	case "float", "double":
		_, err = strconv.ParseFloat(text, 64)
	case "timestamp":
		_, err = time.Parse(time.RFC3339Nano, text)
	case "blob":
		_, err = base64.StdEncoding.DecodeString(text)
	case "string":
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, text) {
			enumValue = text
			err = fmt.Errorf("not one of %s's values %v", shapeName, s.Enum)
		}
	default:
		err = fmt.Errorf("the checker does not know the type")
	}
	if err != nil {
		c.addAbout(shapeName, enumValue, where, "%q is not a valid %s (%s): %v", text, s.Type, shapeName, err)
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
