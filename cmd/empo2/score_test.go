package main

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/empo2/empo2/llama"
)

func TestScoreCLI(t *testing.T) {
	model := llmTestModel(t)
	const prompt, cont = "The fox", " jumps over the lazy dog."
	out, stderr, err := runCLI(t, "score", "--json", "--threads", "1", "--model", model, "--prompt", prompt, "--continuation", cont)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var s struct {
		PromptTokens int `json:"prompt_tokens"`
		Tokens       []struct {
			ID      int32   `json:"id"`
			Piece   string  `json:"piece"`
			LogProb float32 `json:"logprob"`
		} `json:"tokens"`
		Sum float64 `json:"sum_logprob"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// reference: the llama package in-process
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	p, _ := m.Tokenize(prompt, true, true)
	c, _ := m.Tokenize(cont, false, true)
	want, err := ctx.Score(context.Background(), p, c)
	if err != nil {
		t.Fatal(err)
	}
	if s.PromptTokens != len(p) || len(s.Tokens) != len(c) {
		t.Fatalf("CLI scored %d+%d tokens, want %d+%d", s.PromptTokens, len(s.Tokens), len(p), len(c))
	}
	var joined strings.Builder
	var sum float64
	for i, tk := range s.Tokens {
		joined.WriteString(tk.Piece)
		sum += float64(tk.LogProb)
		if tk.ID != c[i] || math.Abs(float64(tk.LogProb-want[i])) > 1e-5 || tk.LogProb > 0 {
			t.Fatalf("token %d: CLI (%d, %v), package (%d, %v)", i, tk.ID, tk.LogProb, c[i], want[i])
		}
	}
	if joined.String() != cont || math.Abs(sum-s.Sum) > 1e-3 {
		t.Fatalf("pieces %q, sum %v vs %v", joined.String(), sum, s.Sum)
	}
	table, stderr, err := runCLI(t, "score", "--threads", "1", "--model", model, "--prompt", prompt, "--continuation", cont)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if !strings.HasPrefix(lines[0], "#") || !strings.Contains(lines[0], "logprob") || len(lines) != len(s.Tokens)+2 || !strings.HasPrefix(lines[len(lines)-1], "sum") {
		t.Fatalf("table:\n%s", table)
	}
	if _, stderr, err := runCLI(t, "score", "--model", model, "--prompt", "x", "--continuation", ""); err == nil {
		t.Fatalf("empty continuation accepted: %s", stderr)
	}
}
