package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decoder fills a Config from the node tree one key at a time, so that a
// value of the wrong type costs only its own key: every other key is still
// decoded and validated, and the operator sees every problem of the file in
// one run. Scalars and types with their own UnmarshalYAML are decoded by
// yaml.v3; mappings, lists and maps are walked here so that each error names
// the exact key (or list item) it belongs to.
type decoder struct {
	file string
	errs Errors
	// broken holds the key paths whose value could not be decoded. They
	// keep their zero value, which must not be reported a second time by
	// the checks that run on the decoded config.
	broken map[string]bool
}

func (d *decoder) fail(line int, path, msg string) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: path, Msg: msg})
	d.broken[path] = true
}

// decode sets v (addressable) from n. On a type error v keeps what it had.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	t := v.Type()
	if isLeaf(t) {
		d.leaf(n, v, path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // "session:" with nothing under it: the zero value, as yaml.v3 does
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n.Line, path, "cannot use "+describeNode(n)+" here: want a mapping of keys")
			return
		}
		fields := fieldIndex(t)
		d.eachPair(n, path, func(k, val *yaml.Node, p string) {
			if i, ok := fields[k.Value]; ok {
				d.decode(val, v.Field(i), p)
			} // an unknown key: the walker has reported it
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(n.Line, path, "cannot use "+describeNode(n)+" here: want a mapping of names to values")
			return
		}
		m := reflect.MakeMap(t)
		d.eachPair(n, path, func(k, val *yaml.Node, p string) {
			key := reflect.New(t.Key()).Elem()
			if err := k.Decode(key.Addr().Interface()); err != nil {
				d.yamlErrors(k, p, err)
				return
			}
			elem := reflect.New(t.Elem()).Elem()
			d.decode(val, elem, p)
			m.SetMapIndex(key, elem)
		})
		v.Set(m)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n.Line, path, "cannot use "+describeNode(n)+" here: want a list")
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	default:
		d.leaf(n, v, path)
	}
}

// eachPair calls fn for every key of a mapping; a key given twice is an
// error (as yaml.v3 reports it) and only its first value counts.
func (d *decoder) eachPair(n *yaml.Node, path string, fn func(k, v *yaml.Node, p string)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if first, ok := seen[k.Value]; ok {
			d.fail(k.Line, p, fmt.Sprintf("key %q is already defined at line %d", k.Value, first))
			continue
		}
		seen[k.Value] = k.Line
		fn(k, val, p)
	}
}

// leaf decodes a scalar (or a type that decodes itself) with yaml.v3 into a
// fresh value, and sets v only when that succeeded.
func (d *decoder) leaf(n *yaml.Node, v reflect.Value, path string) {
	tmp := reflect.New(v.Type())
	if err := n.Decode(tmp.Interface()); err != nil {
		d.yamlErrors(n, path, err)
		return
	}
	v.Set(tmp.Elem())
}

// yamlErrors records yaml.v3's messages ("line 4: cannot unmarshal …") under
// the key being decoded, in the wording `gateway check` has always used.
func (d *decoder) yamlErrors(n *yaml.Node, path string, err error) {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, m := range msgs {
		line, msg := n.Line, m
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			line, _ = strconv.Atoi(sm[1])
			msg = sm[2]
		}
		d.fail(line, path, strings.Replace(msg, "cannot unmarshal", "cannot use", 1))
	}
}

// isLeaf reports whether values of t are decoded by yaml.v3 directly:
// everything but structs, maps and lists, and any type with its own
// UnmarshalYAML.
func isLeaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice:
		return false
	}
	return true
}

// fieldIndex maps each yaml key of struct type t to its field index.
func fieldIndex(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = i
	}
	return out
}

// describeNode names a node the way yaml.v3's messages do: its tag, and a
// scalar's value.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 20 {
		v = v[:17] + "..."
	}
	return fmt.Sprintf("%s `%s`", n.ShortTag(), v)
}

// isBroken reports whether the value at path, or a mapping or list it is
// part of, failed to decode (or names an unset environment variable).
func isBroken(broken map[string]bool, path string) bool {
	if len(broken) == 0 {
		return false
	}
	if broken[""] {
		return true
	}
	for p := path; p != ""; {
		if broken[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return false
}
