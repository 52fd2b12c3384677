package config

import (
	"reflect"
	"strings"
)

// Keys are the key paths of bot.yaml ("session.limits.tokens_per_day"),
// in the order of Config's fields. A path ends at a value: a scalar, a
// duration or size, a list or a mapping (agent.models, auth_tokens,
// limits.users are one key each).
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			out = append(out, path)
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if name := yamlName(f); name != "" {
				walk(f.Type, join(path, name))
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

// Lookup is the value of a key path (a value of Keys, or a section such
// as "locks") as written in the file: nil for a key that is not set (an
// unset pointer), the zero value for one whose field has no pointer.
// ok is false when no such key exists.
func (c *Config) Lookup(path string) (v any, ok bool) {
	rv := reflect.ValueOf(*c)
	for _, name := range strings.Split(path, ".") {
		if rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				return nil, true
			}
			rv = rv.Elem()
		}
		if rv.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for i := range rv.NumField() {
			if yamlName(rv.Type().Field(i)) == name {
				rv, found = rv.Field(i), true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, true
		}
		rv = rv.Elem()
	}
	return rv.Interface(), true
}

// yamlName is the key of a field in bot.yaml; "" for a field that is not
// read from it.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}
