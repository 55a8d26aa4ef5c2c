// Package qwentok finds the real Qwen tokenizer that tests compare against:
// ../shared/qwen-tokenizer beside the repository (tokenizer.json,
// tokenizer_config.json, and fixtures.jsonl, texts with the ids the
// tokenizer's own implementation gives them). Tests skip when it is absent.
package qwentok

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the tokenizer folder, or skips t.
func Dir(t testing.TB) string {
	t.Helper()
	var cands []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				cands = append(cands, filepath.Join(d, "..", "shared", "qwen-tokenizer"))
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	cands = append(cands, "/work/shared/qwen-tokenizer")
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err == nil {
			return d
		}
	}
	t.Skip("the Qwen tokenizer (../shared/qwen-tokenizer) is not available")
	return ""
}

// Fixture is one line of fixtures.jsonl.
type Fixture struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

// Fixtures reads fixtures.jsonl, or skips t.
func Fixtures(t testing.TB) []Fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t), "fixtures.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Fixture
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var f Fixture
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("fixtures.jsonl is empty")
	}
	return out
}
