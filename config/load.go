package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// EmbeddedName is the File of the configuration used when no bot.yaml exists.
const EmbeddedName = "<embedded defaults>"

// embedded is the configuration of a gateway started with no bot.yaml: every
// default, plus Telegram when TELEGRAM_TOKEN is set.
const embedded = `
channels:
  telegram:
    token: ${TELEGRAM_TOKEN:-}
`

// LookupEnv resolves ${VAR} references; os.LookupEnv in production.
type LookupEnv func(name string) (string, bool)

// Load reads, expands, decodes, defaults and validates the file at path.
// Every problem is returned at once as Errors, each naming file, line and key.
func Load(path string, env LookupEnv) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read: %v", errors.Unwrap(err))}}
	}
	return Parse(data, path, env)
}

// Embedded returns the configuration used when there is no bot.yaml.
func Embedded(env LookupEnv) (*Config, error) {
	return Parse([]byte(embedded), EmbeddedName, env)
}

// Parse is Load on bytes already read; file names them in messages.
func Parse(data []byte, file string, env LookupEnv) (*Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	cfg := &Config{File: file, lines: map[string]int{}, broken: map[string]bool{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	// Every stage runs on whatever the one before it could read, so that a
	// file's problems of every kind are reported together: unknown keys
	// and unset variables, values of the wrong type, then the checks of
	// values and of keys against each other. A key that failed an earlier
	// stage keeps its zero value and is not checked again.
	var errs Errors
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		w := walker{file: file, env: env, lines: cfg.lines}
		w.walk(root, reflect.TypeFor[Config](), "")
		for _, e := range w.errs {
			cfg.broken[e.Key] = true
		}
		d := decoder{file: file, broken: cfg.broken}
		d.decode(root, reflect.ValueOf(cfg).Elem(), "")
		errs = append(w.errs, d.errs...)
		// What could not be read, in the order of the file.
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	}
	cfg.applyDefaults()
	errs = append(errs, cfg.Validate()...)
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func yamlError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// walker checks the node tree against the Go types before decoding: unknown
// keys are errors (with a suggestion), ${VAR} references are expanded in
// place, and the line of every key is recorded for later messages.
type walker struct {
	file  string
	env   LookupEnv
	lines map[string]int
	errs  Errors
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		w.expand(n, path)
		return
	case yaml.MappingNode:
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			fields := yamlFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				f, ok := fields[k.Value]
				if !ok {
					w.errs = append(w.errs, &Error{File: w.file, Line: k.Line, Key: p, Msg: unknownKeyMsg(k.Value, path, fields)})
					continue
				}
				w.lines[p] = v.Line
				w.walk(v, f, p)
			}
		case reflect.Map:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				w.lines[p] = v.Line
				w.walk(v, t.Elem(), p)
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice {
			for i, item := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				w.lines[p] = item.Line
				w.walk(item, t.Elem(), p)
			}
		}
	}
}

func unknownKeyMsg(key, parent string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	where := "at the top level"
	if parent != "" {
		where = "in " + parent
	}
	msg := fmt.Sprintf("unknown key %q %s", key, where)
	if s := suggest(key, names); s != "" {
		return msg + fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg + " (known keys: " + strings.Join(names, ", ") + ")"
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var varRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expand replaces ${VAR} and ${VAR:-default} in a scalar. $$ is a literal $.
// An unquoted scalar is re-typed after expansion, so "max_history: ${N}" with
// N=40 is the integer 40.
func (w *walker) expand(n *yaml.Node, path string) {
	if !strings.Contains(n.Value, "$") {
		return
	}
	var missing []string
	out := varRE.ReplaceAllStringFunc(n.Value, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := varRE.FindStringSubmatch(m)
		v, ok := w.env(sm[1])
		if sm[2] != "" { // ${VAR:-default}: default when unset or empty
			if !ok || v == "" {
				return sm[3]
			}
			return v
		}
		if !ok {
			missing = append(missing, sm[1])
		}
		return v
	})
	for _, name := range missing {
		w.errs = append(w.errs, &Error{File: w.file, Line: n.Line, Key: path,
			Msg: fmt.Sprintf("environment variable %s is not set (set it, or write ${%s:-default})", name, name)})
	}
	n.Value = out
	if n.Style == 0 {
		n.Tag = "" // let yaml.v3 resolve the expanded plain scalar's type again
	}
}
