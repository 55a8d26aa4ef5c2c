package llama

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/empo2/empo2/modelgen"
)

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestEmbedder(t *testing.T) {
	e, err := NewEmbedder(tinyPath, EmbedderOptions{Batch: 3, MaxTokens: 64, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// structural interface of memstore
	var _ interface {
		ID() string
		Dim() int
		Embed(context.Context, []string) ([][]float32, error)
	} = e
	if e.Dim() != 64 || e.ID() == "" {
		t.Fatalf("dim %d id %q", e.Dim(), e.ID())
	}
	texts := []string{"the fox jumps", "a completely different sentence about numbers 123", "the fox jumps", "short", "unicode ✓ 日本", "another text to fill a second batch"}
	vs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != len(texts) {
		t.Fatalf("%d vectors", len(vs))
	}
	for i, v := range vs {
		if len(v) != 64 || math.Abs(dot(v, v)-1) > 1e-5 {
			t.Fatalf("vector %d: len %d norm² %v", i, len(v), dot(v, v))
		}
	}
	if d := maxAbsDiff(vs[0], vs[2]); d > 1e-5 {
		t.Fatalf("same text, different vectors (%g)", d)
	}
	if dot(vs[0], vs[1]) > 0.9999 {
		t.Fatalf("different texts embed identically")
	}
	// each vector is independent of its batch neighbours
	for i, text := range texts {
		one, err := e.Embed(context.Background(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(one[0], vs[i]); d > 1e-5 {
			t.Fatalf("text %d alone vs batched differs by %g", i, d)
		}
	}
	// mean pooling: compare with the mean of per-token hidden states is not
	// exposed; check truncation instead (a text longer than MaxTokens works)
	long := ""
	for i := 0; i < 100; i++ {
		long += "word "
	}
	if _, err := e.Embed(context.Background(), []string{long, ""}); err != nil {
		t.Fatal(err)
	}
}

// writeBERT writes a modelgen BERT embedding model (architecture "bert",
// WordPiece vocabulary, mean pooling) into the test directory.
func writeBERT(t testing.TB, cfg modelgen.BERTConfig) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bert.gguf")
	if err := modelgen.WriteBERT(p, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBERTEmbedder runs the encoder path (llama_encode, non-causal
// attention, learned positions) on a generated BERT-architecture GGUF.
func TestBERTEmbedder(t *testing.T) {
	cfg := modelgen.DefaultBERTConfig()
	path := writeBERT(t, cfg)
	m, err := LoadModel(path, ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if info := m.Info(); info.Arch != "bert" || info.NEmbd != cfg.Hidden || info.NVocab != cfg.Vocab || info.NCtxTrain != cfg.Ctx {
		t.Fatalf("info %+v", info)
	}
	// llama.cpp's WPM tokenizer agrees with modelgen's WordPiece encoder:
	// [CLS] pieces [SEP]
	wp, err := cfg.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(modelgen.BuiltinCorpus(), "\n")
	checked := 0
	for _, line := range append(lines[:min(len(lines), 200)], "Zebra-quux, 42!", "xyzzyqwv") {
		if strings.TrimSpace(line) == "" || strings.ContainsFunc(line, func(r rune) bool { return r > 0x7f }) {
			continue // llama.cpp NFD-normalizes non-ASCII first; modelgen's encoder does not
		}
		got, err := m.Tokenize(line, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := wp.Encode(line); !slices.Equal(got, want) {
			t.Fatalf("%q: llama.cpp %v, modelgen %v", line, got, want)
		}
		checked++
	}
	if checked < 50 {
		t.Fatalf("only %d lines checked", checked)
	}
	if sp := m.Special(); sp.BOS != 2 || !sp.AddBOS {
		t.Fatalf("special %+v: want BOS=[CLS]=2 added", sp)
	}

	e, err := NewEmbedderFromModel(m, EmbedderOptions{Batch: 3, MaxTokens: 1000, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Dim() != cfg.Hidden || !strings.HasPrefix(e.ID(), "llama:bert:") {
		t.Fatalf("dim %d id %q", e.Dim(), e.ID())
	}
	texts := []string{"go to the kitchen", "open the door", "go to the kitchen", "the price is 42 dollars", "a", strings.Repeat("long text ", 300)}
	vs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if len(v) != cfg.Hidden || math.Abs(dot(v, v)-1) > 1e-5 {
			t.Fatalf("vector %d: len %d norm² %v", i, len(v), dot(v, v))
		}
	}
	if d := maxAbsDiff(vs[0], vs[2]); d > 1e-6 {
		t.Fatalf("same text, different vectors (%g)", d)
	}
	if dot(vs[0], vs[1]) > 0.9999 {
		t.Fatal("different texts embed identically")
	}
	// Deterministic across embedders: the same batching in a new embedder
	// gives the same vectors exactly.
	e3, err := NewEmbedder(path, EmbedderOptions{Batch: 3, MaxTokens: 1000, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	again, err := e3.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		if d := maxAbsDiff(again[i], vs[i]); d != 0 {
			t.Fatalf("text %d: the same batching in a new embedder differs by %g", i, d)
		}
	}
	// Independent of the batch up to float32 reduction order: ggml picks
	// other matmul kernels for other batch shapes, and which ones depends on
	// the CPU's SIMD (below 1e-5 on the machine this test was first written
	// on; 1.3e-5 on an AVX2-only AMD EPYC Zen 3). The vectors have unit norm,
	// so 5e-5 is still far below any difference between texts.
	e2, err := NewEmbedder(path, EmbedderOptions{Batch: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	for i, text := range texts {
		one, err := e2.Embed(context.Background(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(one[0], vs[i]); d > 5e-5 {
			t.Fatalf("text %d: batch of 1 in a new embedder differs by %g", i, d)
		}
	}
	// F16 weights (token_types stays F32: an F16 one aborts in ggml_add)
	cfg16 := cfg
	cfg16.DType = "f16"
	e16, err := NewEmbedder(writeBERT(t, cfg16), EmbedderOptions{Batch: 3, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e16.Close()
	v16, err := e16.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		if d := maxAbsDiff(v16[i], vs[i]); d > 0.02 || d == 0 {
			t.Fatalf("text %d: f16 model vs f32 differs by %g", i, d)
		}
	}
	// a context longer than the 128-position table would abort in ggml
	if _, err := NewContext(m, ContextParams{NCtx: cfg.Ctx + 1, Threads: 1, Embeddings: true}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NCtx beyond the position table: %v", err)
	}
	// an encoder has no LM head: llama.cpp would return all-zero logits
	if _, err := NewContext(m, ContextParams{Threads: 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("generation context on an encoder: %v", err)
	}
}
