// Package config reads, overrides, prints and documents YAML configuration
// files whose keys are documented beside their Go fields.
//
// A configuration is a Go struct with `yaml:"name"` tags; each field also
// carries `doc:"…"`, its one-line documentation. A section (a nested
// struct) is documented on the field that holds it, its keys on its own
// fields; `yaml:",inline"` fields add their keys to the enclosing section,
// `yaml:"-"` fields are not part of the file. Keys are dotted YAML paths
// ("update.lr"). The default of every key is the value in the Schema's
// default configuration, so each default and each text exists once, in the
// package that reads the section.
//
// Schema[T] is generic over the configuration type: strict decoding (an
// unknown key is an error naming it and its line), --set overrides of one
// key with a YAML value, commented printing (every key with its
// documentation and, where it differs, its default) and the Markdown
// reference table. Every error wraps the Schema's sentinel.
//
// Values are checked where every command benefits: decoding refuses a
// fraction in an integer key (YAML decoders truncate 1.5 to 1) and a
// non-finite number; Check refuses non-finite floats built in Go and any
// value outside its key's `range:"[lo,hi]"` tag ("(" and ")" for open ends,
// an empty bound for none: `range:"(0,]"` is > 0); errors name the key and
// the value. Checks that span keys belong to the configuration's own
// Validate.
//
// Pure Go (go.yaml.in/yaml/v3 and reflection); nothing here knows a model.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Schema describes the configuration type T: its documented keys and its
// defaults.
type Schema[T any] struct {
	def    func() T
	err    error
	docs   map[string]string       // dotted key → documentation, every key of T
	keys   []string                // every key of T in field order
	types  map[string]reflect.Type // dotted key → its Go type
	ranges map[string]interval     // keys with a `range` tag
}

// New makes the schema of T from its struct tags; def returns the default
// configuration and err is the sentinel that every error wraps. A
// malformed `range` tag panics (a programmer's mistake, like
// regexp.MustCompile's).
func New[T any](def func() T, err error) *Schema[T] {
	s := &Schema[T]{def: def, err: err, docs: map[string]string{}, types: map[string]reflect.Type{}, ranges: map[string]interval{}}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				if opts == "inline" && f.Type.Kind() == reflect.Struct {
					walk(f.Type, prefix)
				}
				continue
			}
			key := prefix + name
			s.keys = append(s.keys, key)
			s.docs[key] = f.Tag.Get("doc")
			s.types[key] = f.Type
			if r, ok := f.Tag.Lookup("range"); ok {
				iv, err := parseInterval(r)
				if err != nil {
					panic(fmt.Sprintf("config: key %s: %v", key, err))
				}
				s.ranges[key] = iv
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key+".")
			}
		}
	}
	walk(reflect.TypeFor[T](), "")
	return s
}

// Fields lists every key of T (sections and leaves) in field order.
func (s *Schema[T]) Fields() []string { return append([]string(nil), s.keys...) }

// Keys lists every key of T, sorted.
func (s *Schema[T]) Keys() []string {
	ks := s.Fields()
	sort.Strings(ks)
	return ks
}

// Doc is the documentation of key ("" when the key has none or does not
// exist).
func (s *Schema[T]) Doc(key string) string { return s.docs[key] }

// Decode decodes one YAML document from r onto c strictly: an unknown key
// is an error naming it and its line, and so is a fraction in an integer
// key (never truncated) or a non-finite number (.nan, .inf) in a float key.
// what names the source in errors. An empty document leaves c as it is;
// a second document is an error (it would be ignored).
func (s *Schema[T]) Decode(r io.Reader, c *T, what string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", s.err, what, err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("%w: %s: %w", s.err, what, err)
	}
	if err := s.checkNode(&n, reflect.TypeFor[T](), "", what, true); err != nil {
		return err
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: %w", s.err, what, err)
	}
	// A second document ("---" then more keys) would be ignored silently.
	var extra yaml.Node
	if err := d.Decode(&extra); err == nil && !emptyDocument(&extra) {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return fmt.Errorf("%w: %s: a second YAML document starts at line %d (after a \"---\" line): a configuration is one document; merge the two or remove the \"---\"",
			s.err, what, line)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: %w", s.err, what, err)
	}
	return nil
}

// emptyDocument: a document with nothing in it (a trailing "---").
func emptyDocument(n *yaml.Node) bool {
	if len(n.Content) == 0 {
		return true
	}
	c := n.Content[0]
	return len(n.Content) == 1 && c.Kind == yaml.ScalarNode && c.Tag == "!!null" && c.Value == ""
}

// Set applies one override "key.path=value" to c; value is YAML ("0.5",
// "[a, b]", "true", "text") and replaces the key's whole value. An unknown
// key is an error listing the known ones.
func (s *Schema[T]) Set(c *T, kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("%w: --set %q: want key.path=value", s.err, kv)
	}
	if _, known := s.docs[key]; !known {
		return fmt.Errorf("%w: --set: unknown key %q (known: %s)", s.err, key, strings.Join(s.Keys(), ", "))
	}
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return fmt.Errorf("%w: %w", s.err, err)
	}
	var vn yaml.Node
	if err := yaml.Unmarshal([]byte(val), &vn); err != nil {
		return fmt.Errorf("%w: --set %s: value %q: %w", s.err, key, val, err)
	}
	var nv *yaml.Node
	if len(vn.Content) == 1 {
		nv = vn.Content[0]
	} else {
		nv = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}
	}
	if err := s.checkNode(nv, s.types[key], key, "--set", false); err != nil {
		return err
	}
	m := &root
	parts := strings.Split(key, ".")
	for i, p := range parts {
		found := false
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == p {
				if i == len(parts)-1 {
					m.Content[j+1] = nv
				} else {
					m = m.Content[j+1]
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%w: --set: unknown key %q", s.err, key)
		}
	}
	var out T
	b, err := yaml.Marshal(&root)
	if err != nil {
		return fmt.Errorf("%w: %w", s.err, err)
	}
	if err := s.Decode(bytes.NewReader(b), &out, "--set "+key); err != nil {
		return err
	}
	*c = out
	return nil
}

// hasChildDocs reports whether key is a section (has keys below it).
func (s *Schema[T]) hasChildDocs(key string) bool {
	for k := range s.docs {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// node encodes c as a YAML mapping with every key commented with its
// documentation (and the default where it differs from c's value).
func (s *Schema[T]) node(c T) (*yaml.Node, error) {
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return nil, err
	}
	var def yaml.Node
	if err := def.Encode(s.def()); err != nil {
		return nil, err
	}
	var walk func(n, d *yaml.Node, prefix string)
	walk = func(n, d *yaml.Node, prefix string) {
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			path := prefix + k.Value
			var dv *yaml.Node
			if d != nil {
				for i := 0; i+1 < len(d.Content); i += 2 {
					if d.Content[i].Value == k.Value {
						dv = d.Content[i+1]
					}
				}
			}
			doc := s.docs[path]
			if v.Kind == yaml.MappingNode && s.hasChildDocs(path) {
				k.HeadComment = doc
				walk(v, dv, path+".")
				continue
			}
			if dv != nil && nodeText(dv) != nodeText(v) {
				doc += " (default " + nodeText(dv) + ")"
			}
			k.HeadComment = doc
		}
	}
	walk(&root, &def, "")
	return &root, nil
}

// nodeText is a value's one-line YAML text ("" shows as "", an empty map
// as {}).
func nodeText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			return `""`
		}
		return n.Value
	}
	b, _ := yaml.Marshal(n)
	t := strings.TrimSpace(string(b))
	if n.Kind == yaml.MappingNode && t == "{}" || t == "" {
		return "{}"
	}
	return strings.ReplaceAll(t, "\n", " ")
}

// Print writes c as commented YAML: every key with its documentation and,
// where c differs from the default, the default.
func (s *Schema[T]) Print(w io.Writer, c T) error {
	n, err := s.node(c)
	if err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return err
	}
	return enc.Close()
}

// Reference is the Markdown table of every leaf key (sorted), its default
// and its documentation.
func (s *Schema[T]) Reference() string {
	var def yaml.Node
	_ = def.Encode(s.def())
	vals := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for j := 0; j+1 < len(n.Content); j += 2 {
			path := prefix + n.Content[j].Value
			v := n.Content[j+1]
			if v.Kind == yaml.MappingNode && s.hasChildDocs(path) {
				walk(v, path+".")
				continue
			}
			vals[path] = nodeText(v)
		}
	}
	walk(&def, "")
	var b strings.Builder
	b.WriteString("| key | default | meaning |\n| --- | --- | --- |\n")
	for _, k := range s.Keys() {
		v, leaf := vals[k]
		if !leaf {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", k, strings.ReplaceAll(v, "|", `\|`), strings.ReplaceAll(s.docs[k], "|", `\|`))
	}
	return b.String()
}

// Undocumented lists the keys of T whose doc tag is empty.
func (s *Schema[T]) Undocumented() []string {
	var out []string
	for _, k := range s.keys {
		if s.docs[k] == "" {
			out = append(out, k)
		}
	}
	return out
}

// DocTable is the drift check of a Markdown reference: the text between
// the lines "<!-- NAME:begin -->" and "<!-- NAME:end -->" of the file at
// path must be Reference(). With update the file is rewritten to hold it
// instead. The error says how to regenerate.
func (s *Schema[T]) DocTable(path, name string, update bool) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the lines %q and %q", path, strings.TrimSpace(begin), end)
	}
	want := string(doc[:i+len(begin)]) + s.Reference() + string(doc[j:])
	if update {
		return os.WriteFile(path, []byte(want), 0o644)
	}
	if want != string(doc) {
		return fmt.Errorf("the table of %s is not the current reference of the configuration; regenerate it (the test's -update-doc flag)", path)
	}
	return nil
}
