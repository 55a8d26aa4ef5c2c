package llama

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"
)

/*
#include "llama.h"
*/
import "C"

// EmbedderOptions configures NewEmbedder. Zero fields take defaults.
type EmbedderOptions struct {
	Model ModelParams
	// MaxTokens per text; longer texts are truncated. Default
	// min(n_ctx_train, 512); never more than a model's learned positions
	// (BERT's position table), to which it is lowered.
	MaxTokens int
	// Batch is the number of texts embedded per decode. Default 8.
	Batch int
	// Threads, default runtime.NumCPU().
	Threads int
}

// Embedder computes mean-pooled, L2-normalized embeddings with a model (a
// causal LM such as Qwen2, or a BERT-type embedding GGUF). It satisfies
// the memory store's embedder interface (ID, Dim, Embed) structurally. Safe
// for concurrent use (calls are serialized).
type Embedder struct {
	model     *Model
	ownModel  bool
	ctx       *Context
	maxTokens int
	id        string
}

// NewEmbedder loads the model at path and makes an embedder of it.
func NewEmbedder(path string, opts EmbedderOptions) (*Embedder, error) {
	m, err := LoadModel(path, opts.Model)
	if err != nil {
		return nil, err
	}
	e, err := NewEmbedderFromModel(m, opts)
	if err != nil {
		m.Close()
		return nil, err
	}
	e.ownModel = true
	return e, nil
}

// NewEmbedderFromModel makes an embedder sharing an already loaded model
// (the model must stay open until the embedder is closed; it is kept
// alive by the embedder).
func NewEmbedderFromModel(m *Model, opts EmbedderOptions) (*Embedder, error) {
	if opts.MaxTokens == 0 {
		opts.MaxTokens = min(m.info.NCtxTrain, 512)
		if opts.MaxTokens <= 0 {
			opts.MaxTokens = 512
		}
	}
	if opts.Batch == 0 {
		opts.Batch = 8
	}
	if opts.Threads == 0 {
		opts.Threads = runtime.NumCPU()
	}
	if m.maxPos > 0 && opts.MaxTokens > m.maxPos {
		// learned position table (BERT): longer texts are truncated to it
		opts.MaxTokens = m.maxPos
	}
	if opts.MaxTokens < 1 || opts.Batch < 1 || opts.Batch > 256 {
		return nil, fmt.Errorf("%w: MaxTokens %d, Batch %d", ErrInvalidArgument, opts.MaxTokens, opts.Batch)
	}
	// one text per sequence; a decode holds at most MaxTokens tokens so no
	// sequence is split across ubatches (required for pooling, and by
	// non-causal encoders)
	ctx, err := NewContext(m, ContextParams{
		NCtx: opts.MaxTokens, NBatch: opts.MaxTokens, NSeqMax: opts.Batch,
		Threads: opts.Threads, Embeddings: true, KVUnified: true,
	})
	if err != nil {
		return nil, err
	}
	name := m.info.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(m.path), filepath.Ext(m.path))
	}
	return &Embedder{
		model: m, ctx: ctx, maxTokens: opts.MaxTokens,
		id: fmt.Sprintf("llama:%s:%s:%dp:%dd:mean", m.info.Arch, name, m.info.NParams, m.info.NEmbd),
	}, nil
}

// ID identifies the embedding function (architecture, name, parameter
// count, dimension, pooling): vectors with different IDs are not comparable.
func (e *Embedder) ID() string { return e.id }

// Dim is the embedding dimension.
func (e *Embedder) Dim() int { return e.model.info.NEmbd }

// Close frees the embedder (and its model when NewEmbedder loaded it).
func (e *Embedder) Close() error {
	if e == nil {
		return nil
	}
	err := e.ctx.Close()
	if e.ownModel {
		e.model.Close()
	}
	return err
}

// Embed returns one unit-length vector per text. Texts are truncated to
// MaxTokens tokens; an empty text embeds as its special tokens, or as a
// zero vector when it has none.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	toks := make([][]int32, len(texts))
	for i, t := range texts {
		tk, err := e.model.Tokenize(t, true, false)
		if err != nil {
			return nil, err
		}
		if len(tk) > e.maxTokens {
			tk = tk[:e.maxTokens]
		}
		toks[i] = tk
	}
	c := e.ctx
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	out := make([][]float32, len(texts))
	dim := e.model.info.NEmbd
	for i := 0; i < len(texts); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		j, n := i, 0
		for j < len(texts) && j-i < c.nSeqMax && n+len(toks[j]) <= c.nBatch {
			n += len(toks[j])
			j++
		}
		if j == i { // cannot happen: texts are truncated to MaxTokens <= NBatch
			return nil, fmt.Errorf("%w: text %d has %d tokens, batch holds %d", ErrContextFull, i, len(toks[i]), c.nBatch)
		}
		c.clearKV()
		k := 0
		for t := i; t < j; t++ {
			for pos, tok := range toks[t] {
				c.setBatch(k, tok, pos, t-i, true)
				k++
			}
		}
		if k > 0 {
			if err := c.decode(k); err != nil {
				return nil, err
			}
		}
		for t := i; t < j; t++ {
			v := make([]float32, dim)
			out[t] = v
			if len(toks[t]) == 0 {
				continue
			}
			p := C.llama_get_embeddings_seq(c.c, C.llama_seq_id(t-i))
			if p == nil {
				return nil, fmt.Errorf("%w: no pooled embedding for text %d", ErrDecode, t)
			}
			copy(v, unsafe.Slice((*float32)(unsafe.Pointer(p)), dim))
			var ss float64
			for _, x := range v {
				ss += float64(x) * float64(x)
			}
			if ss > 0 {
				inv := float32(1 / math.Sqrt(ss))
				for d := range v {
					v[d] *= inv
				}
			}
		}
		i = j
	}
	return out, nil
}
