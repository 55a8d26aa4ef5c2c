package memstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cos(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestHashEmbedderDeterministicAndNormalized(t *testing.T) {
	ctx := context.Background()
	texts := []string{
		"You are in the kitchen. There is a stove, a sink and a fridge.",
		"You are in the kitchen. There is a stove, a sink, and a fridge!",
		"The greenhouse contains a flower pot with a seed.",
		"Ünïcödé wörds and 42 digits",
		"",
	}
	a, err := NewHashEmbedder(0).Embed(ctx, texts)
	require.NoError(t, err)
	b, err := NewHashEmbedder(DefaultDim).Embed(ctx, texts)
	require.NoError(t, err)
	assert.Equal(t, a, b, "two instances give identical vectors")
	for i, v := range a[:4] {
		require.Len(t, v, DefaultDim)
		assert.InDelta(t, 1, math.Sqrt(cos(v, v)), 1e-6, "text %d not unit length", i)
	}
	assert.Equal(t, 0.0, cos(a[4], a[4]), "empty text embeds to zero")
	assert.Greater(t, cos(a[0], a[1]), 0.9, "near-identical texts")
	assert.Less(t, cos(a[0], a[2]), 0.5, "unrelated texts fall under the reference threshold")
	assert.Equal(t, "hash-ngram-v1/384", NewHashEmbedder(0).ID())

	// Golden digest: hash-ngram-v1's features are part of its ID; if this
	// changes, bump the version in ID() (stored vectors would no longer match).
	h := sha256.New()
	for _, v := range a {
		for _, x := range v {
			bits := math.Float32bits(x)
			h.Write([]byte{byte(bits), byte(bits >> 8), byte(bits >> 16), byte(bits >> 24)})
		}
	}
	t.Logf("digest %s", hex.EncodeToString(h.Sum(nil)))
	assert.Equal(t, "ed0f7b941704737db24d61c1fa5096f21f4e404e8cef50a489da381af796b10c", hex.EncodeToString(h.Sum(nil)))

	ctxC, cancel := context.WithCancel(ctx)
	cancel()
	_, err = NewHashEmbedder(8).Embed(ctxC, texts)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestDotKernelsAgree(t *testing.T) {
	rng := newRand(7)
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 100, 384, 1000} {
		a, b := make([]float32, n), make([]float32, n+5)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		var want float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		assert.InDelta(t, want, float64(dot(a, b)), 1e-4*(1+math.Abs(want)), "dot n=%d", n)
		assert.InDelta(t, want, float64(dotGo(a, b)), 1e-4*(1+math.Abs(want)), "dotGo n=%d", n)
		if n > 0 {
			assert.Equal(t, float32(0), dot(a[:0], b), "empty")
		}
	}
	t.Logf("assembly kernel in use: %v", useAVX2Kernel())
}

// TestCutPieces counts pieces as BERT's basic tokenizer splits text (words
// of letters and digits, every other non-space character alone), checked
// against hand counts.
func TestCutPieces(t *testing.T) {
	s := "user: Task: boil water.\n\nYou are in the kitchen."
	// user : Task : boil water . You are in the kitchen . = 13 pieces
	for n, want := range map[int]string{
		1: "user", 2: "user:", 5: "user: Task: boil", 6: "user: Task: boil water", 7: "user: Task: boil water.",
		8: "user: Task: boil water.\n\nYou", 12: "user: Task: boil water.\n\nYou are in the kitchen", 13: s, 100: s, 0: s, -1: s,
	} {
		assert.Equal(t, want, CutPieces(s, n), "n = %d", n)
	}
	assert.Equal(t, "don'", CutPieces("don't stop", 2), "an apostrophe is a piece: don ' t")
	assert.Equal(t, "abc123 x2", CutPieces("abc123 x2 é-ü", 2), "letters and digits make one word")
	assert.Equal(t, "abc123 x2 é-", CutPieces("abc123 x2 é-ü", 4))
	assert.Equal(t, "  ", CutPieces("  ", 1))

	ctx := context.Background()
	h := NewHashEmbedder(64)
	cut := h.WithMaxPieces(6)
	assert.Equal(t, h.ID(), cut.ID())
	assert.Equal(t, 0, h.MaxPieces())
	assert.Equal(t, 6, cut.MaxPieces())
	got, err := cut.Embed(ctx, []string{s})
	require.NoError(t, err)
	want, err := h.Embed(ctx, []string{"user: Task: boil water"})
	require.NoError(t, err)
	assert.Equal(t, want, got, "the cut embedder embeds the first 6 pieces")
	full, err := h.Embed(ctx, []string{s})
	require.NoError(t, err)
	assert.NotEqual(t, full, got)
}
