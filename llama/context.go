package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "internal.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// ContextParams configures NewContext. Zero fields take defaults.
type ContextParams struct {
	// NCtx is the number of tokens each sequence may hold (prompt plus
	// generated tokens). Default: min(n_ctx_train, 2048). llama.cpp rounds
	// it up to a multiple of 256.
	NCtx int
	// NBatch is the most tokens submitted to one llama_decode (prompt
	// chunks, scoring batches). Default 512; raised to NSeqMax if smaller.
	NBatch int
	// NSeqMax is the most sequences decoded together (N of Generate,
	// pairs per Score batch). Default 1.
	NSeqMax int
	// Threads for decoding. Default runtime.NumCPU().
	Threads int
	// Embeddings makes the context produce mean-pooled embeddings instead
	// of logits (see Embedder).
	Embeddings bool
	// KVUnified shares one KV buffer between all sequences: the prompt
	// prefix is then shared without copying, but each generated token
	// attends over every sequence's cells. The default (false) gives each
	// sequence its own KV stream; the prompt's KV is copied into each.
	KVUnified bool
	// NoPrefixCache makes every Generate decode its whole prompt, instead
	// of reusing the longest common prefix with the previous Generate's
	// sequence 0 (prompt plus its output) when the adapters are unchanged.
	NoPrefixCache bool
	// KVType is the KV cache element type: "f32" (default) or "f16".
	// FlashAttn is "off" (default), "on" or "auto". The defaults make
	// log-probs independent of batching to ~1e-6: ggml's CPU flash
	// attention and an f16 cache round K/V (and the attention sums) to
	// half precision, which turns float reordering between batched and
	// single decoding into log-prob differences of ~2e-4 and shifts the
	// log-probs themselves by ~5e-4. Use "f16"/"auto" (llama.cpp's
	// defaults) for half the KV memory when that does not matter.
	KVType    string
	FlashAttn string
}

// Context is a llama.cpp inference context (llama_context) with its own
// KV cache. Its methods are safe for concurrent use (serialized).
type Context struct {
	mu       sync.Mutex
	c        *C.struct_llama_context
	model    *Model
	batch    C.struct_llama_batch
	nBatch   int
	nSeqMax  int
	nCtxSeq  int
	embd     bool
	adapters map[*Adapter]float32

	// prefix cache: kvTokens are the tokens of sequence 0 in the KV cache
	// (valid when kvValid), computed under adapter state kvSig.
	noCache    bool
	kvValid    bool
	kvTokens   []int32
	kvSig      uint64
	adapterVer uint64 // bumped by SetAdapter/RemoveAdapter/ClearAdapters
	reused     int    // prompt tokens reused by the last Generate
	threads    int    // decode threads; also the sampler's workers (sampleRows)
	// per-worker scratch of sampleRows (n_vocab float64s each)
	sampleScratch [][]float64

	// per-sequence KV contents of GenerateSlots (slots.go); nil = unknown
	slots *slotSet
}

// MaxSequences is the most sequences one context decodes together
// (llama.cpp's LLAMA_MAX_SEQ): the bound of ContextParams.NSeqMax.
func MaxSequences() int { return int(C.llama_max_parallel_sequences()) }

// MaxContextCells bounds NCtx × NSeqMax, the KV cells of one context.
const MaxContextCells = 1 << 26

// NewContext creates a context on model.
func NewContext(model *Model, p ContextParams) (*Context, error) {
	if err := model.acquire(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			model.release()
		}
	}()
	if p.NSeqMax == 0 {
		p.NSeqMax = 1
	}
	if p.NBatch == 0 {
		p.NBatch = 512
	}
	if p.Threads == 0 {
		p.Threads = runtime.NumCPU()
	}
	if p.NCtx == 0 {
		p.NCtx = min(model.info.NCtxTrain, 2048)
		if p.NCtx <= 0 {
			p.NCtx = 2048
		}
	}
	switch {
	case p.NSeqMax < 1 || p.NSeqMax > MaxSequences():
		return nil, fmt.Errorf("%w: NSeqMax %d not in [1, %d]", ErrInvalidArgument, p.NSeqMax, MaxSequences())
	case p.NCtx < 1 || p.NCtx > 1<<24:
		return nil, fmt.Errorf("%w: NCtx %d", ErrInvalidArgument, p.NCtx)
	case p.NBatch < 1 || p.NBatch > 1<<20:
		return nil, fmt.Errorf("%w: NBatch %d", ErrInvalidArgument, p.NBatch)
	case p.Threads < 1 || p.Threads > 1024:
		return nil, fmt.Errorf("%w: Threads %d", ErrInvalidArgument, p.Threads)
	case int64(p.NCtx)*int64(p.NSeqMax) > MaxContextCells:
		return nil, fmt.Errorf("%w: NCtx*NSeqMax too large", ErrInvalidArgument)
	case model.encoder && !p.Embeddings:
		// llama.cpp would run it and return zero logits (a uniform
		// distribution) instead of failing
		return nil, fmt.Errorf("%w: %s is a non-causal encoder (embedding model, architecture %s): it has no language-model head to generate or score with; use it with Embeddings: true or NewEmbedder",
			ErrInvalidArgument, model.path, model.info.Arch)
	case model.maxPos > 0 && p.NCtx > model.maxPos:
		// a position past the model's position table aborts in ggml_get_rows
		return nil, fmt.Errorf("%w: NCtx %d exceeds the model's %d learned positions", ErrInvalidArgument, p.NCtx, model.maxPos)
	}
	// a generation step decodes one token per sequence in one batch
	p.NBatch = max(p.NBatch, p.NSeqMax)
	if p.Embeddings {
		// llama.cpp reserves its worst-case pooled graph with n_ubatch
		// tokens over NSeqMax sequences; when NSeqMax does not divide it,
		// the rounded-up graph fails GGML_ASSERT(ggml_can_mul_mat) and
		// aborts. Round up here.
		p.NBatch = (p.NBatch + p.NSeqMax - 1) / p.NSeqMax * p.NSeqMax
		if p.NBatch > p.NCtx*p.NSeqMax {
			return nil, fmt.Errorf("%w: embeddings need NBatch (%d) <= NCtx*NSeqMax (%d)", ErrInvalidArgument, p.NBatch, p.NCtx*p.NSeqMax)
		}
	}
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(p.NCtx * p.NSeqMax)
	cp.n_batch = C.uint32_t(p.NBatch)
	cp.n_ubatch = C.uint32_t(p.NBatch)
	cp.n_seq_max = C.uint32_t(p.NSeqMax)
	cp.n_threads = C.int32_t(p.Threads)
	cp.n_threads_batch = C.int32_t(p.Threads)
	cp.embeddings = C.bool(p.Embeddings)
	cp.kv_unified = C.bool(p.KVUnified)
	cp.no_perf = true
	switch p.KVType {
	case "f16":
	case "", "f32":
		cp.type_k = C.GGML_TYPE_F32
		cp.type_v = C.GGML_TYPE_F32
	default:
		return nil, fmt.Errorf("%w: KVType %q (want f16 or f32)", ErrInvalidArgument, p.KVType)
	}
	if p.Embeddings {
		cp.pooling_type = C.LLAMA_POOLING_TYPE_MEAN
	}
	switch p.FlashAttn {
	case "auto":
	case "on":
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
	case "", "off":
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
	default:
		return nil, fmt.Errorf("%w: FlashAttn %q (want auto, on or off)", ErrInvalidArgument, p.FlashAttn)
	}
	cc := initFromModel(model.c, cp)
	if cc == nil {
		return nil, fmt.Errorf("%w: llama_init_from_model failed (see log)", ErrContext)
	}
	c := &Context{
		c:        cc,
		model:    model,
		batch:    C.llama_batch_init(C.int32_t(p.NBatch), 0, 1),
		nBatch:   int(C.llama_n_batch(cc)),
		nSeqMax:  int(C.llama_n_seq_max(cc)),
		nCtxSeq:  int(C.llama_n_ctx_seq(cc)),
		embd:     p.Embeddings,
		adapters: map[*Adapter]float32{},
		noCache:  p.NoPrefixCache,
		threads:  p.Threads,
	}
	c.nBatch = min(c.nBatch, p.NBatch)
	if model.maxPos > 0 {
		// llama.cpp rounds n_ctx_seq up; positions must stay in the table
		c.nCtxSeq = min(c.nCtxSeq, model.maxPos)
	}
	ok = true
	runtime.SetFinalizer(c, func(c *Context) { c.Close() })
	return c, nil
}

// Model returns the context's model.
func (c *Context) Model() *Model { return c.model }

// NCtxSeq is the number of tokens one sequence may hold.
func (c *Context) NCtxSeq() int { return c.nCtxSeq }

// NBatch is the most tokens per decode call.
func (c *Context) NBatch() int { return c.nBatch }

// NSeqMax is the most sequences decoded together.
func (c *Context) NSeqMax() int { return c.nSeqMax }

// Close frees the context and releases its model and adapters. Idempotent.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	llamaFree(c.c)
	C.llama_batch_free(c.batch)
	c.c = nil
	for a := range c.adapters {
		a.release()
	}
	c.adapters = nil
	c.model.release()
	runtime.SetFinalizer(c, nil)
	return nil
}

// lock locks the context for a call; it fails after Close.
func (c *Context) lock() error {
	if c == nil {
		return ErrClosed
	}
	c.mu.Lock()
	if c.c == nil {
		c.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// clearKV empties the KV cache of all sequences.
func (c *Context) clearKV() {
	c.kvValid = false
	c.slots = nil
	C.llama_memory_clear(C.llama_get_memory(c.c), C.bool(true))
}

// adapterSig identifies the current adapter state: it changes whenever an
// adapter is attached, detached or rescaled (adapterVer) or the weights of
// an attached adapter are written (each Adapter's generation counter only
// grows, so the sum changes too).
func (c *Context) adapterSig() uint64 {
	sig := c.adapterVer << 32
	for a := range c.adapters {
		sig += a.gen.Load()
	}
	return sig
}

// reusePrefix keeps the longest prefix of prompt that sequence 0 already
// holds in the KV cache (computed under the current adapter state), drops
// everything else, and returns its length (0: the cache was cleared). At
// least the last prompt token is always decoded again, for its logits.
func (c *Context) reusePrefix(prompt []int32) int {
	if c.noCache || !c.kvValid || c.kvSig != c.adapterSig() {
		c.clearKV()
		return 0
	}
	n := 0
	for n < len(c.kvTokens) && n < len(prompt)-1 && c.kvTokens[n] == prompt[n] {
		n++
	}
	if n == 0 {
		c.clearKV()
		return 0
	}
	mem := C.llama_get_memory(c.c)
	c.slots = nil // the other sequences are dropped
	for s := 1; s < c.nSeqMax; s++ {
		C.llama_memory_seq_rm(mem, C.llama_seq_id(s), -1, -1)
	}
	if !bool(C.llama_memory_seq_rm(mem, 0, C.llama_pos(n), -1)) {
		c.clearKV()
		return 0
	}
	c.kvValid = false // until the new contents are recorded
	return n
}

// LastPrefixReused is the number of prompt tokens the last Generate took
// from the KV cache instead of decoding them.
func (c *Context) LastPrefixReused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reused
}

// setBatch fills entry i of the batch.
func (c *Context) setBatch(i int, tok int32, pos int, seq int, logits bool) {
	b := &c.batch
	unsafe.Slice((*C.llama_token)(b.token), c.nBatch)[i] = C.llama_token(tok)
	unsafe.Slice((*C.llama_pos)(b.pos), c.nBatch)[i] = C.llama_pos(pos)
	unsafe.Slice((*C.int32_t)(b.n_seq_id), c.nBatch)[i] = 1
	seqs := unsafe.Slice((**C.llama_seq_id)(unsafe.Pointer(b.seq_id)), c.nBatch)
	*seqs[i] = C.llama_seq_id(seq)
	var l C.int8_t
	if logits {
		l = 1
	}
	unsafe.Slice((*C.int8_t)(b.logits), c.nBatch)[i] = l
}

// batchWantsLogits reports whether entry i of the batch requested logits.
func (c *Context) batchWantsLogits(i int) bool {
	return unsafe.Slice((*C.int8_t)(c.batch.logits), c.nBatch)[i] != 0
}

// decode runs llama_decode (or llama_encode for encoder-only models) on
// the first n entries of the batch, holding the attached adapters' read
// locks so their weights cannot change mid-computation.
func (c *Context) decode(n int) error {
	c.batch.n_tokens = C.int32_t(n)
	for a := range c.adapters {
		a.mu.RLock()
	}
	var rc C.int32_t
	if c.embd && !bool(C.llama_model_has_decoder(c.model.c)) {
		rc = C.llama_encode(c.c, c.batch)
	} else {
		rc = C.llama_decode(c.c, c.batch)
	}
	for a := range c.adapters {
		a.mu.RUnlock()
	}
	if rc != 0 {
		switch rc {
		case 1:
			return fmt.Errorf("%w: no KV slot for a batch of %d tokens (context full)", ErrContextFull, n)
		case 2:
			return fmt.Errorf("%w: aborted", ErrDecode)
		default:
			return fmt.Errorf("%w: llama_decode returned %d", ErrDecode, int(rc))
		}
	}
	return nil
}

// logits returns the logits row of batch output i, valid until the next
// decode (read in place from llama.cpp's output buffer).
func (c *Context) logits(i int) ([]float32, error) {
	p := C.llama_get_logits_ith(c.c, C.int32_t(i))
	if p == nil {
		return nil, fmt.Errorf("%w: no logits for batch index %d", ErrDecode, i)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), c.model.info.NVocab), nil
}

// allLogits returns the logits of the last decode when every one of its n
// batch entries requested logits: n rows of n_vocab, in batch order.
func (c *Context) allLogits(n int) ([]float32, error) {
	p := C.llama_get_logits(c.c)
	if p == nil {
		return nil, fmt.Errorf("%w: no logits", ErrDecode)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), n*c.model.info.NVocab), nil
}

// Logits decodes tokens (teacher forcing, one sequence from an empty cache)
// and returns a copy of the logits after the last token. Mostly for tests
// and debugging.
func (c *Context) Logits(tokens []int32) ([]float32, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.embd {
		return nil, fmt.Errorf("%w: embeddings context has no logits", ErrInvalidArgument)
	}
	if err := c.checkPrompt(tokens, 0); err != nil {
		return nil, err
	}
	c.clearKV()
	if err := c.prefill(tokens, 0, 0); err != nil {
		return nil, err
	}
	l, err := c.logits(-1)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), l...), nil
}

// checkPrompt validates a prompt and the room needed after it.
func (c *Context) checkPrompt(prompt []int32, extra int) error {
	if len(prompt) == 0 {
		return fmt.Errorf("%w: empty prompt", ErrInvalidArgument)
	}
	if err := c.model.checkTokens(prompt); err != nil {
		return err
	}
	if len(prompt) > c.nCtxSeq {
		return fmt.Errorf("%w: %d tokens, context holds %d per sequence", ErrPromptTooLong, len(prompt), c.nCtxSeq)
	}
	if len(prompt)+extra > c.nCtxSeq {
		return fmt.Errorf("%w: prompt %d + %d tokens > %d per sequence", ErrContextFull, len(prompt), extra, c.nCtxSeq)
	}
	return nil
}

// prefill decodes tokens at positions pos0... into seq in chunks of
// nBatch, with logits only for the last token.
func (c *Context) prefill(tokens []int32, seq, pos0 int) error {
	for start := 0; start < len(tokens); start += c.nBatch {
		end := min(start+c.nBatch, len(tokens))
		for i := start; i < end; i++ {
			c.setBatch(i-start, tokens[i], pos0+i, seq, i == len(tokens)-1)
		}
		if err := c.decode(end - start); err != nil {
			return err
		}
	}
	return nil
}

// SetAdapter attaches a (or changes its scale) on this context. The next
// call recomputes everything with the new adapter set.
func (c *Context) SetAdapter(a *Adapter, scale float32) error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if a == nil {
		return fmt.Errorf("%w: nil adapter", ErrInvalidArgument)
	}
	if !finite(scale) {
		return fmt.Errorf("%w: adapter scale %v", ErrInvalidArgument, scale)
	}
	if a.model != c.model {
		return fmt.Errorf("%w: adapter belongs to another model", ErrBadAdapter)
	}
	if _, ok := c.adapters[a]; !ok {
		if err := a.acquire(); err != nil {
			return err
		}
	}
	c.adapters[a] = scale
	c.adapterVer++
	if rc := C.llama_set_adapter_lora(c.c, a.c, C.float(scale)); rc != 0 {
		delete(c.adapters, a)
		a.release()
		return fmt.Errorf("%w: llama_set_adapter_lora returned %d", ErrBadAdapter, int(rc))
	}
	return c.invalidateGraph()
}

// RemoveAdapter detaches a from this context (no-op if not attached).
func (c *Context) RemoveAdapter(a *Adapter) error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if _, ok := c.adapters[a]; !ok {
		return nil
	}
	C.llama_rm_adapter_lora(c.c, a.c)
	delete(c.adapters, a)
	c.adapterVer++
	a.release()
	return c.invalidateGraph()
}

// ClearAdapters detaches every adapter.
func (c *Context) ClearAdapters() error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	C.llama_clear_adapter_lora(c.c)
	c.adapterVer++
	for a := range c.adapters {
		a.release()
	}
	clear(c.adapters)
	return c.invalidateGraph()
}

// Adapters returns the attached adapters and their scales.
func (c *Context) Adapters() map[*Adapter]float32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[*Adapter]float32, len(c.adapters))
	for a, s := range c.adapters {
		out[a] = s
	}
	return out
}

func (c *Context) invalidateGraph() error {
	if rc := C.empo2_invalidate_graph(c.c); rc != 0 {
		return fmt.Errorf("%w: graph reserve after adapter change failed (%d)", ErrDecode, int(rc))
	}
	return nil
}
