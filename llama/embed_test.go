package llama

import (
	"context"
	"math"
	"testing"
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
