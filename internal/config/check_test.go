package config

import (
	"errors"
	"math"
	"strings"
	"testing"
)

type ranged struct {
	Steps  int       `yaml:"steps" doc:"steps" range:"[0,]"`
	Rank   int       `yaml:"rank" doc:"rank" range:"[1,1024]"`
	Prob   float64   `yaml:"prob" doc:"probability" range:"[0,1]"`
	LR     float64   `yaml:"lr" doc:"learning rate" range:"(0,10]"`
	Clip   float32   `yaml:"clip" doc:"clip" range:"[0,1)"`
	Thresh float64   `yaml:"thresh" doc:"log-prob threshold" range:"[,0]"`
	Free   float64   `yaml:"free" doc:"any finite number"`
	Sizes  []int     `yaml:"sizes,flow" doc:"sizes"`
	Ws     []float64 `yaml:"ws,flow" doc:"weights"`
	Sub    struct {
		Count uint           `yaml:"count" doc:"a count"`
		N     int64          `yaml:"n" doc:"n"`
		M     map[string]int `yaml:"m" doc:"a map of ints"`
	} `yaml:"sub" doc:"a section"`
}

func rangedDefault() ranged { return ranged{Rank: 8, Prob: 0.5, LR: 1e-4} }

// TestDecodeRefusesFractions: an integer key given a fraction is an error
// naming the key, the value and the line, never a truncation; integral
// numbers written as floats are exact and accepted.
func TestDecodeRefusesFractions(t *testing.T) {
	s := New(rangedDefault, errTest)
	for _, tc := range []struct{ doc, key, val, line string }{
		{"steps: 1.5\n", "steps", "1.5", "line 1"},
		{"prob: 0.1\nrank: 8.9\n", "rank", "8.9", "line 2"},
		{"sub:\n  n: -2.5\n", "sub.n", "-2.5", "line 2"},
		{"sub:\n  count: 0.5\n", "sub.count", "0.5", "line 2"},
		{"sizes: [1, 2.25]\n", "sizes", "2.25", "line 1"},
		{"sub:\n  m: {a: 1, b: 3.5}\n", "sub.m", "3.5", "line 2"},
	} {
		c := rangedDefault()
		err := s.Decode(strings.NewReader(tc.doc), &c, "f.yaml")
		if !errors.Is(err, errTest) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.val) ||
			!strings.Contains(err.Error(), tc.line) || !strings.Contains(err.Error(), "not an integer") {
			t.Errorf("%q: want an error naming %s = %s at %s, got %v (decoded %+v)", tc.doc, tc.key, tc.val, tc.line, err, c)
		}
	}
	c := rangedDefault()
	if err := s.Decode(strings.NewReader("steps: 2.0\nrank: 1e2\n"), &c, "f.yaml"); err != nil || c.Steps != 2 || c.Rank != 100 {
		t.Fatalf("integral floats: %v %+v", err, c)
	}
	for _, kv := range []string{"steps=1.5", "rank=8.9", "sizes=[3, 0.5]"} {
		c := rangedDefault()
		key, val, _ := strings.Cut(kv, "=")
		err := s.Set(&c, kv)
		if !errors.Is(err, errTest) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "not an integer") {
			t.Errorf("--set %s: %v (decoded %+v)", kv, err, c)
		}
		_ = val
	}
}

// TestCheckFiniteAndRanges: Check refuses a non-finite float anywhere and a
// value outside its range tag, naming the key and the value; Decode and Set
// refuse non-finite YAML numbers too.
func TestCheckFiniteAndRanges(t *testing.T) {
	s := New(rangedDefault, errTest)
	c := rangedDefault()
	if err := s.Check(&c); err != nil {
		t.Fatalf("default: %v", err)
	}
	for _, tc := range []struct {
		set      func(*ranged)
		key, val string
	}{
		{func(c *ranged) { c.Free = math.NaN() }, "free", "NaN"},
		{func(c *ranged) { c.Free = math.Inf(-1) }, "free", "-Inf"},
		{func(c *ranged) { c.Ws = []float64{1, math.Inf(1)} }, "ws", "+Inf"},
		{func(c *ranged) { c.Clip = float32(math.NaN()) }, "clip", "NaN"},
		{func(c *ranged) { c.Steps = -1 }, "steps", "-1"},
		{func(c *ranged) { c.Rank = 0 }, "rank", "0"},
		{func(c *ranged) { c.Rank = 2000 }, "rank", "2000"},
		{func(c *ranged) { c.Prob = 1.5 }, "prob", "1.5"},
		{func(c *ranged) { c.LR = 0 }, "lr", "0"},
		{func(c *ranged) { c.LR = 1e300 }, "lr", "1e+300"},
		{func(c *ranged) { c.Clip = 1 }, "clip", "1"},
		{func(c *ranged) { c.Thresh = 0.5 }, "thresh", "0.5"},
	} {
		c := rangedDefault()
		tc.set(&c)
		err := s.Check(&c)
		if !errors.Is(err, errTest) || !strings.Contains(err.Error(), tc.key+" ") || !strings.Contains(err.Error(), tc.val) {
			t.Errorf("%s = %s: want an error naming both, got %v", tc.key, tc.val, err)
		}
	}
	for _, ok := range []func(*ranged){
		func(c *ranged) { c.Prob, c.Clip, c.Thresh = 1, 0.999, -1e30 },
		func(c *ranged) { c.Prob, c.LR, c.Steps = 0, 10, 1<<40 },
	} {
		c := rangedDefault()
		ok(&c)
		if err := s.Check(&c); err != nil {
			t.Errorf("in range: %v", err)
		}
	}
	for _, doc := range []string{"free: .nan\n", "lr: .inf\n", "ws: [1, -.inf]\n"} {
		c := rangedDefault()
		if err := s.Decode(strings.NewReader(doc), &c, "f.yaml"); !errors.Is(err, errTest) || !strings.Contains(err.Error(), "finite") {
			t.Errorf("%q: %v", doc, err)
		}
	}
	if err := s.Set(&c, "free=.nan"); !errors.Is(err, errTest) || !strings.Contains(err.Error(), "free") {
		t.Errorf("--set free=.nan: %v", err)
	}
}

// TestRangeTagsParse: every range tag of a schema is well formed (New
// panics on a malformed one: a programmer's mistake, caught here).
func TestRangeTagsParse(t *testing.T) {
	type bad struct {
		X float64 `yaml:"x" range:"0..1"`
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "x") {
			t.Fatalf("malformed range tag: recovered %v", r)
		}
	}()
	New(func() bad { return bad{} }, errTest)
}
