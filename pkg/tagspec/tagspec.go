// Package tagspec reads the tags a StorageClass, VolumeAttributesClass or VolumeSnapshotClass asks for
// (tagSpecification_N: "key=value") and the driver's --extra-tags. A value may be a Go text/template over
// the names of the objects the volume or snapshot is made for (Data: what the sidecars' --extra-create-metadata
// and --extra-modify-metadata pass), with a few string functions, as the EBS CSI driver allows, so that one
// class can tag each volume with its claim.
//
// Class parameters are set by cluster admins, but the names they are filled with come from users, and a
// template runs inside the controller: so only what cannot loop or allocate without bound is allowed. range,
// template definitions and the print and call builtins are refused at parse time; the output stops at EC2's
// limits.
package tagspec

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every error about a tag or template.
var ErrInvalid = errors.New("invalid tag")

// EC2's limits on a tag, in characters, and the prefix it keeps for itself.
const (
	MaxKeyLength   = 128
	MaxValueLength = 256
	awsPrefix      = "aws:"
)

// Data are the names a tag template may use. Fields the sidecar did not pass are empty.
type Data struct {
	PVCName, PVCNamespace, PVName                                          string
	VolumeSnapshotName, VolumeSnapshotNamespace, VolumeSnapshotContentName string
}

// Render reads one "key=value" specification and renders its value as a template over data. The key is taken
// as it is (trimmed); both must meet EC2's rules (Check).
func Render(spec string, data Data) (key, value string, err error) {
	k, tmpl, ok := strings.Cut(spec, "=")
	key = strings.TrimSpace(k)
	if !ok || key == "" {
		return "", "", fmt.Errorf("%w: %q must be key=value", ErrInvalid, spec)
	}
	value, err = execute(strings.TrimSpace(tmpl), data)
	if err != nil {
		return "", "", fmt.Errorf("%w: tag %q: %w", ErrInvalid, key, err)
	}
	if err := Check(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// Check applies EC2's rules to a tag: a key of 1 to 128 characters not starting with "aws:", a value of up to
// 256, both valid UTF-8.
func Check(key, value string) error {
	switch {
	case key == "" || utf8.RuneCountInString(key) > MaxKeyLength:
		return fmt.Errorf("%w: key %q must be 1 to %d characters", ErrInvalid, key, MaxKeyLength)
	case utf8.RuneCountInString(value) > MaxValueLength:
		return fmt.Errorf("%w: the value of %q is longer than %d characters", ErrInvalid, key, MaxValueLength)
	case !utf8.ValidString(key) || !utf8.ValidString(value):
		return fmt.Errorf("%w: tag %q is not valid UTF-8", ErrInvalid, key)
	case strings.HasPrefix(strings.ToLower(key), awsPrefix):
		return fmt.Errorf("%w: key %q: the %q prefix is reserved by AWS", ErrInvalid, key, awsPrefix)
	}
	return nil
}

// ParseList reads "key=value,key=value" (the driver's --extra-tags): plain values, no templates.
func ParseList(s string) (map[string]string, error) {
	tags := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return tags, nil
	}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q must be key=value", ErrInvalid, item)
		}
		if err := Check(k, v); err != nil {
			return nil, err
		}
		tags[k] = v
	}
	return tags, nil
}

// refused are the builtins a template may not name: those that print (whose width and precision can allocate
// without bound), call functions or escape for other languages. allowed refuses them before a template runs.
var refused = []string{"print", "printf", "println", "call", "html", "js", "urlquery"}

// funcs are the functions a template may call, besides text/template's other builtins.
func funcs() template.FuncMap {
	return template.FuncMap{
		"field":     field,
		"substring": substring,
		"toUpper":   strings.ToUpper,
		"toLower":   strings.ToLower,
		"contains":  func(substr, s string) bool { return strings.Contains(s, substr) },
	}
}

// field is the index-th (from 0) of the parts of s split by delim.
func field(delim string, index int, s string) (string, error) {
	parts := strings.Split(s, delim)
	if index < 0 || index >= len(parts) {
		return "", fmt.Errorf("field %d of %q split by %q: it has %d", index, s, delim, len(parts))
	}
	return parts[index], nil
}

// substring is s[start:end] in characters, end clamped to the length.
func substring(start, end int, s string) (string, error) {
	r := []rune(s)
	end = min(end, len(r))
	if start < 0 || start > end {
		return "", fmt.Errorf("substring %d to %d of %q", start, end, s)
	}
	return string(r[start:end]), nil
}

func execute(text string, data Data) (string, error) {
	if !strings.Contains(text, "{{") {
		return text, nil
	}
	t, err := template.New("tag").Funcs(funcs()).Parse(text)
	if err != nil {
		return "", err
	}
	if len(t.Templates()) > 1 {
		return "", errors.New("template definitions are not allowed")
	}
	if err := allowed(t.Tree.Root); err != nil {
		return "", err
	}
	var out limitedBuilder
	if err := t.Execute(&out, data); err != nil {
		return "", err
	}
	return out.String(), nil
}

// allowed refuses what could loop or call other templates, and the refused builtins by name.
func allowed(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := allowed(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		return errors.New("range is not allowed")
	case *parse.TemplateNode:
		return errors.New("template calls are not allowed")
	case *parse.IfNode:
		return allowedBranch(&n.BranchNode)
	case *parse.WithNode:
		return allowedBranch(&n.BranchNode)
	case *parse.ActionNode:
		return allowedPipe(n.Pipe)
	}
	return nil
}

func allowedBranch(b *parse.BranchNode) error {
	if err := allowedPipe(b.Pipe); err != nil {
		return err
	}
	if err := allowed(b.List); err != nil {
		return err
	}
	return allowed(b.ElseList)
}

func allowedPipe(p *parse.PipeNode) error {
	if p == nil {
		return nil
	}
	for _, cmd := range p.Cmds {
		for _, arg := range cmd.Args {
			switch a := arg.(type) {
			case *parse.IdentifierNode:
				for _, name := range refused {
					if a.Ident == name {
						return fmt.Errorf("%s is not allowed", name)
					}
				}
			case *parse.PipeNode:
				if err := allowedPipe(a); err != nil {
					return err
				}
			case *parse.ChainNode:
				if inner, ok := a.Node.(*parse.PipeNode); ok {
					if err := allowedPipe(inner); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// limitedBuilder stops a template once its output is longer than any tag value may be.
type limitedBuilder struct{ strings.Builder }

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > 4*MaxValueLength {
		return 0, fmt.Errorf("the value is longer than %d characters", MaxValueLength)
	}
	return b.Builder.Write(p)
}
