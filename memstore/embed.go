package memstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Embedder turns texts into L2-normalized vectors. The llama package's GGUF
// embedder satisfies it structurally; HashEmbedder is the built-in default.
type Embedder interface {
	ID() string // stable identity, e.g. "hash-ngram-v1/384"; stored with every entry
	Dim() int
	Embed(ctx context.Context, texts []string) ([][]float32, error) // L2-normalized vectors
}

// DefaultDim is the dimension of the default HashEmbedder (that of
// all-MiniLM-L6-v2, the reference's sentence embedder).
const DefaultDim = 384

// HashEmbedder is a deterministic, model-free text embedder: lower-cased word
// unigrams, word bigrams and character 3- and 4-grams of each word (with
// boundary marks) are hashed (FNV-1a, 64 bit) into Dim signed buckets and the
// result is L2-normalized. Texts sharing words and word pieces get a high
// cosine; it knows no synonyms. An empty text (no letters or digits) embeds
// to the zero vector, which matches nothing. Safe for concurrent use.
//
// WithMaxPieces makes it read only the first n pieces of each text (see
// CutPieces), as a sentence encoder reads only its first n word pieces.
type HashEmbedder struct{ dim, maxPieces int }

// NewHashEmbedder returns a HashEmbedder of dimension dim (DefaultDim if dim <= 0).
func NewHashEmbedder(dim int) *HashEmbedder {
	if dim <= 0 {
		dim = DefaultDim
	}
	return &HashEmbedder{dim: dim}
}

// WithMaxPieces returns a copy of h that embeds CutPieces(text, n) instead
// of text (n < 1: the whole text). The vectors live in the same space as
// h's (the ID is the same): only the part of a long text that is read
// changes.
func (h *HashEmbedder) WithMaxPieces(n int) *HashEmbedder {
	c := *h
	c.maxPieces = max(n, 0)
	return &c
}

// MaxPieces is the number of pieces read per text (0: all).
func (h *HashEmbedder) MaxPieces() int { return h.maxPieces }

// CutPieces returns the longest prefix of text holding at most n pieces,
// a piece being what a BERT tokenizer's basic (pre-WordPiece) split makes
// of text: a maximal run of letters, digits and combining marks (a word),
// or any single other character that is not white space (punctuation and
// symbols are pieces of their own). WordPiece then splits words missing
// from its vocabulary into several pieces, so n of these pieces cover at
// least as much text as n word pieces of all-MiniLM-L6-v2 do (the same
// for the common English words of the environments). n < 1 returns text.
func CutPieces(text string, n int) string {
	if n < 1 {
		return text
	}
	count, end, inWord := 0, 0, false // end: byte after the last piece so far
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
		switch {
		case unicode.IsSpace(r):
			inWord = false
			continue
		case !(word && inWord): // a new piece starts here
			if count == n {
				return text[:end]
			}
			count++
		}
		inWord = word
		end = i + utf8.RuneLen(r)
	}
	return text
}

// ID is "hash-ngram-v1/<dim>"; the version changes whenever the features do.
func (h *HashEmbedder) ID() string { return fmt.Sprintf("hash-ngram-v1/%d", h.dim) }

// Dim is the vector dimension.
func (h *HashEmbedder) Dim() int { return h.dim }

// Embed embeds each text; it only fails when ctx is done.
func (h *HashEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = h.embedOne(CutPieces(t, h.maxPieces))
	}
	return out, nil
}

// Feature weights of hash-ngram-v1 (part of its identity: do not change
// without bumping the version in ID).
const (
	wWord   = 1.0
	wBigram = 0.7
	wChar   = 0.25
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvRunes(h uint64, rs []rune) uint64 {
	for _, r := range rs {
		h = fnvByte(h, byte(r))
		h = fnvByte(h, byte(r>>8))
		h = fnvByte(h, byte(r>>16))
	}
	return h
}

func (h *HashEmbedder) add(v []float64, hash uint64, w float64) {
	// Final avalanche so that low bits depend on every input byte.
	hash ^= hash >> 33
	hash *= 0xff51afd7ed558ccd
	hash ^= hash >> 33
	i := hash % uint64(h.dim)
	if hash&(1<<62) != 0 {
		w = -w
	}
	v[i] += w
}

func (h *HashEmbedder) embedOne(text string) []float32 {
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	v := make([]float64, h.dim)
	var padded []rune
	for i, w := range words {
		h.add(v, fnvString(fnvByte(fnvOffset, 'w'), w), wWord)
		if i > 0 {
			hb := fnvString(fnvByte(fnvOffset, 'b'), words[i-1])
			hb = fnvByte(hb, ' ')
			h.add(v, fnvString(hb, w), wBigram)
		}
		padded = append(padded[:0], '<')
		padded = append(padded, []rune(w)...)
		padded = append(padded, '>')
		for n := 3; n <= 4; n++ {
			for j := 0; j+n <= len(padded); j++ {
				h.add(v, fnvRunes(fnvByte(fnvOffset, byte('0'+n)), padded[j:j+n]), wChar)
			}
		}
	}
	var ss float64
	for _, x := range v {
		ss += float64(x * x) // conversion prevents FMA fusion: same bits on every CPU
	}
	out := make([]float32, h.dim)
	if ss == 0 {
		return out
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		out[i] = float32(x * inv)
	}
	return out
}

// normalize returns v scaled to unit L2 norm (a copy), and false for a zero
// or non-finite vector (which then matches nothing).
func normalize(v []float32) ([]float32, bool) {
	var ss float64
	for _, x := range v {
		ss += float64(float64(x) * float64(x))
	}
	out := make([]float32, len(v))
	if ss == 0 || math.IsInf(ss, 0) || math.IsNaN(ss) {
		return out, false
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, true
}

// BuiltinEmbedder returns the built-in embedder whose ID is id (a
// HashEmbedder for "hash-ngram-v1/<dim>"), or false when id names another
// embedder (a model, which must be loaded by the caller).
func BuiltinEmbedder(id string) (Embedder, bool) {
	var dim int
	if _, err := fmt.Sscanf(id, "hash-ngram-v1/%d", &dim); err != nil || dim <= 0 {
		return nil, false
	}
	h := NewHashEmbedder(dim)
	if h.ID() != id {
		return nil, false
	}
	return h, true
}
