package config

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

var errTest = errors.New("test: bad configuration")

type inner struct {
	Rate  float64 `yaml:"rate" doc:"learning rate"`
	Kind  string  `yaml:"kind" doc:"a | b"`
	Extra struct {
		Deep int `yaml:"deep" doc:"a nested leaf"`
	} `yaml:"extra" doc:"a nested section"`
}

type prompt struct {
	Tokens int    `yaml:"tokens" doc:"max tokens"`
	System string `yaml:"system" doc:"system text"`
}

type section struct {
	Temp   float64 `yaml:"temp" doc:"temperature"`
	Prompt prompt  `yaml:",inline"`
	Last   bool    `yaml:"last" doc:"last key"`
	Seed   int64   `yaml:"-"` // not part of the file
}

type testConfig struct {
	Name  string            `yaml:"name" doc:"the name"`
	Tags  []string          `yaml:"tags,flow" doc:"tags"`
	Opts  map[string]string `yaml:"opts" doc:"free options"`
	Inner inner             `yaml:"inner" doc:"the inner section"`
	Sec   section           `yaml:"sec" doc:"a section with inline keys"`
}

func testDefault() testConfig {
	c := testConfig{Name: "x", Tags: []string{"a"}, Inner: inner{Rate: 0.5, Kind: "a"}, Sec: section{Temp: 1, Prompt: prompt{Tokens: 32}}}
	c.Inner.Extra.Deep = 3
	return c
}

func TestSchemaKeys(t *testing.T) {
	s := New(testDefault, errTest)
	want := []string{"name", "tags", "opts", "inner", "inner.rate", "inner.kind", "inner.extra", "inner.extra.deep",
		"sec", "sec.temp", "sec.tokens", "sec.system", "sec.last"}
	if got := strings.Join(s.Fields(), " "); got != strings.Join(want, " ") {
		t.Fatalf("fields %s, want %s", got, strings.Join(want, " "))
	}
	if s.Doc("sec.tokens") != "max tokens" || s.Doc("inner") != "the inner section" || s.Doc("sec.seed") != "" {
		t.Fatalf("docs: %q %q %q", s.Doc("sec.tokens"), s.Doc("inner"), s.Doc("sec.seed"))
	}
	if k := s.Keys(); k[0] != "inner" || k[len(k)-1] != "tags" {
		t.Fatalf("keys not sorted: %v", k)
	}
}

func TestSchemaDecodeStrict(t *testing.T) {
	s := New(testDefault, errTest)
	c := testDefault()
	err := s.Decode(strings.NewReader("name: y\ninner:\n  rate: 1\n  rtae: 2\n"), &c, "f.yaml")
	if !errors.Is(err, errTest) || !strings.Contains(err.Error(), "rtae") || !strings.Contains(err.Error(), "line 4") ||
		!strings.Contains(err.Error(), "f.yaml") {
		t.Fatalf("want an error naming rtae at line 4 of f.yaml, got %v", err)
	}
	c = testDefault()
	if err := s.Decode(strings.NewReader("sec:\n  tokens: 8\n"), &c, "f.yaml"); err != nil || c.Sec.Prompt.Tokens != 8 || c.Sec.Temp != 1 {
		t.Fatalf("inline key: %v %+v", err, c.Sec)
	}
	if err := s.Decode(strings.NewReader(""), &c, "empty"); err != nil || c.Sec.Prompt.Tokens != 8 {
		t.Fatalf("empty document: %v %+v", err, c)
	}
}

// A second YAML document would be ignored: it is an error naming its line
// (issue 38); a leading "---" is one document.
func TestSchemaDecodeMultiDocument(t *testing.T) {
	s := New(testDefault, errTest)
	c := testDefault()
	err := s.Decode(strings.NewReader("name: y\n---\nname: z\n"), &c, "f.yaml")
	if !errors.Is(err, errTest) || !strings.Contains(err.Error(), "second YAML document") || !strings.Contains(err.Error(), "line 3") ||
		!strings.Contains(err.Error(), "f.yaml") {
		t.Fatalf("want an error naming the second document at line 3 of f.yaml, got %v", err)
	}
	c = testDefault()
	if err := s.Decode(strings.NewReader("---\nname: y\n---\n"), &c, "f.yaml"); err != nil || c.Name != "y" {
		t.Fatalf("leading ---: %v %+v", err, c)
	}
}

func TestSchemaSet(t *testing.T) {
	s := New(testDefault, errTest)
	c := testDefault()
	c.Opts = map[string]string{"old": "1"}
	for _, kv := range []string{"inner.extra.deep=7", "tags=[p, q]", "sec.system=hello world", "opts={k: v}", "sec.tokens=9"} {
		if err := s.Set(&c, kv); err != nil {
			t.Fatalf("--set %s: %v", kv, err)
		}
	}
	if c.Inner.Extra.Deep != 7 || strings.Join(c.Tags, ",") != "p,q" || c.Sec.Prompt.System != "hello world" ||
		len(c.Opts) != 1 || c.Opts["k"] != "v" || c.Sec.Prompt.Tokens != 9 || c.Inner.Rate != 0.5 {
		t.Fatalf("after --set: %+v (a map value replaces the whole map)", c)
	}
	for _, bad := range []string{"inner.rtae=1", "nokey", "=1", "inner.rate=[1", "inner.rate=abc", "sec.seed=1"} {
		err := s.Set(&c, bad)
		if !errors.Is(err, errTest) {
			t.Errorf("--set %s: %v", bad, err)
		}
		if strings.HasPrefix(bad, "inner.rtae") && !strings.Contains(err.Error(), "known: inner, inner.extra") {
			t.Errorf("unknown key error does not list the keys: %v", err)
		}
	}
}

func TestSchemaPrint(t *testing.T) {
	s := New(testDefault, errTest)
	c := testDefault()
	c.Inner.Rate = 0.25
	c.Opts = map[string]string{"k": "v"}
	var b bytes.Buffer
	if err := s.Print(&b, c); err != nil {
		t.Fatal(err)
	}
	want := `# the name
name: x
# tags
tags: [a]
# free options (default {})
opts:
  k: v
# the inner section
inner:
  # learning rate (default 0.5)
  rate: 0.25
  # a | b
  kind: a
  # a nested section
  extra:
    # a nested leaf
    deep: 3
# a section with inline keys
sec:
  # temperature
  temp: 1
  # max tokens
  tokens: 32
  # system text
  system: ""
  # last key
  last: false
`
	if b.String() != want {
		t.Fatalf("print:\n%s\nwant:\n%s", b.String(), want)
	}
	var back testConfig
	if err := s.Decode(&b, &back, "printed"); err != nil || back.Inner.Rate != 0.25 || back.Opts["k"] != "v" {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestSchemaReference(t *testing.T) {
	s := New(testDefault, errTest)
	want := "| key | default | meaning |\n| --- | --- | --- |\n" +
		"| `inner.extra.deep` | `3` | a nested leaf |\n" +
		"| `inner.kind` | `a` | a \\| b |\n" +
		"| `inner.rate` | `0.5` | learning rate |\n" +
		"| `name` | `x` | the name |\n" +
		"| `opts` | `{}` | free options |\n" +
		"| `sec.last` | `false` | last key |\n" +
		"| `sec.system` | `\"\"` | system text |\n" +
		"| `sec.temp` | `1` | temperature |\n" +
		"| `sec.tokens` | `32` | max tokens |\n" +
		"| `tags` | `[a]` | tags |\n"
	if got := s.Reference(); got != want {
		t.Fatalf("reference:\n%s\nwant:\n%s", got, want)
	}
}

// DocTable finds a stale table, rewrites it with update, then passes; a
// file without the markers is an error; Undocumented names keys without
// a doc tag.
func TestDocTable(t *testing.T) {
	s := New(testDefault, errTest)
	p := t.TempDir() + "/doc.md"
	stale := "intro\n<!-- ref:begin -->\n| old |\n<!-- ref:end -->\nafter\n"
	if err := os.WriteFile(p, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.DocTable(p, "ref", false); err == nil {
		t.Fatal("a stale table passed")
	}
	if err := s.DocTable(p, "ref", true); err != nil {
		t.Fatal(err)
	}
	if err := s.DocTable(p, "ref", false); err != nil {
		t.Fatalf("after update: %v", err)
	}
	b, _ := os.ReadFile(p)
	if want := "intro\n<!-- ref:begin -->\n" + s.Reference() + "<!-- ref:end -->\nafter\n"; string(b) != want {
		t.Fatalf("rewritten file:\n%s", b)
	}
	if err := s.DocTable(p, "other", false); err == nil {
		t.Fatal("missing markers passed")
	}
	if u := s.Undocumented(); len(u) != 0 {
		t.Fatalf("undocumented %v", u)
	}
	type bare struct {
		A int `yaml:"a"`
		B int `yaml:"b" doc:"b"`
	}
	if u := New(func() bare { return bare{} }, errTest).Undocumented(); len(u) != 1 || u[0] != "a" {
		t.Fatalf("undocumented %v, want [a]", u)
	}
}
