package llama

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// FinishReason says why a sequence ended.
type FinishReason string

const (
	FinishEOG    FinishReason = "eog"    // an end-of-generation token was sampled
	FinishStop   FinishReason = "stop"   // a stop string appeared
	FinishLength FinishReason = "length" // MaxTokens or the context was reached
)

// Sequence is one generated continuation.
type Sequence struct {
	// Tokens are all sampled tokens, including a final EOG token and the
	// tokens of a stop string.
	Tokens []int32
	// LogProbs[i] is log p(Tokens[i] | prompt, Tokens[:i]) under the raw
	// model: log-softmax of the logits at temperature 1, no truncation.
	LogProbs []float32
	// Text is the detokenized continuation without the EOG token and cut
	// before a stop string.
	Text   string
	Finish FinishReason
}

// Generate samples p.N sequences continuing prompt. The prompt is decoded
// once into sequence 0 (reusing the prefix cache, see the package doc), its
// KV cache is copied to the other sequences (llama_memory_seq_cp), and then
// all unfinished sequences advance by one token per llama_decode. It
// honours ctx cancellation between steps.
func (c *Context) Generate(ctx context.Context, prompt []int32, p SampleParams) ([]Sequence, error) {
	out, err := c.generate(ctx, [][]int32{prompt}, p, true)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// GenerateMany samples p.N sequences for each of several prompts in one
// batch (len(prompts)·p.N ≤ NSeqMax): the prompts are prefilled together,
// each into its own sequence, then all sequences are decoded together.
// Sequence j of prompt i is seeded with index SeqOffset + i·N + j, so the
// result equals Generate(prompts[i]) with SeqOffset + i·N, token for token.
// It does not use the prefix cache (and clears it).
func (c *Context) GenerateMany(ctx context.Context, prompts [][]int32, p SampleParams) ([][]Sequence, error) {
	return c.generate(ctx, prompts, p, false)
}

func (c *Context) generate(ctx context.Context, prompts [][]int32, p SampleParams, cache bool) ([][]Sequence, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.embd {
		return nil, fmt.Errorf("%w: embeddings context cannot generate", ErrInvalidArgument)
	}
	if p.N == 0 {
		p.N = 1
	}
	switch {
	case len(prompts) == 0:
		return nil, fmt.Errorf("%w: no prompts", ErrInvalidArgument)
	case p.N < 0 || p.N*len(prompts) > c.nSeqMax:
		return nil, fmt.Errorf("%w: %d prompts x N %d sequences, NSeqMax %d", ErrInvalidArgument, len(prompts), p.N, c.nSeqMax)
	case p.MaxTokens < 0:
		return nil, fmt.Errorf("%w: MaxTokens %d", ErrInvalidArgument, p.MaxTokens)
	case p.TopK < 0 || p.SeqOffset < 0:
		return nil, fmt.Errorf("%w: negative TopK or SeqOffset", ErrInvalidArgument)
	case !finite(p.TopP) || !finite(p.MinP) || !finite(p.Temperature) || p.TopP < 0 || p.MinP < 0 || p.MinP > 1:
		return nil, fmt.Errorf("%w: TopP %v, MinP %v, Temperature %v", ErrInvalidArgument, p.TopP, p.MinP, p.Temperature)
	}
	maxTok := make([]int, len(prompts))
	for i, prompt := range prompts {
		if err := c.checkPrompt(prompt, p.MaxTokens); err != nil {
			if len(prompts) > 1 {
				return nil, fmt.Errorf("prompt %d: %w", i, err)
			}
			return nil, err
		}
		maxTok[i] = p.MaxTokens
		if maxTok[i] == 0 {
			maxTok[i] = c.nCtxSeq - len(prompt)
		}
		if maxTok[i] == 0 {
			return nil, fmt.Errorf("%w: prompt %d fills the context", ErrContextFull, i)
		}
	}
	maxStop, err := stopLen(p)
	if err != nil {
		return nil, err
	}

	// prefill: prompt i into sequence i*N, its last logits in firstLogits[i]
	nP, N := len(prompts), p.N
	firstLogits := make([][]float32, nP)
	sig := c.adapterSig()
	if cache && nP == 1 {
		reuse := c.reusePrefix(prompts[0])
		c.reused = reuse
		if err := c.prefill(prompts[0][reuse:], 0, reuse); err != nil {
			c.clearKV()
			return nil, err
		}
		l, err := c.logits(-1)
		if err != nil {
			return nil, err
		}
		firstLogits[0] = l
	} else {
		c.clearKV()
		c.reused = 0
		if err := c.prefillMany(prompts, N, firstLogits); err != nil {
			c.clearKV()
			return nil, err
		}
	}
	mem := c.memory()
	for i := 0; i < nP; i++ {
		for j := 1; j < N; j++ {
			mem.seqCopy(i*N, i*N+j)
		}
	}

	st := make([]*genState, nP*N)
	for i := range st {
		st[i] = &genState{s: newSampler(p, p.SeqOffset+i), pos0: len(prompts[i/N]), maxTok: maxTok[i/N]}
	}
	// every sequence's last sampled token goes to its own KV sequence, at
	// the position after the prompt and the tokens before it
	err = c.sampleLoop(ctx, st, &p, maxStop, func(i int) []float32 { return firstLogits[i/N] },
		func(i int) (seq, pos int) { return i, st[i].pos0 + len(st[i].seq.Tokens) - 1 }, nil)
	if err != nil {
		c.clearKV()
		return nil, err
	}
	if cache && nP == 1 {
		// sequence 0's cache now holds the prompt and every token of its
		// output but the last (sampled, never decoded)
		t0 := st[0].seq.Tokens
		c.kvTokens = append(append(c.kvTokens[:0], prompts[0]...), t0[:len(t0)-1]...)
		c.kvSig, c.kvValid = sig, true
	}
	out := make([][]Sequence, nP)
	for i, x := range st {
		x.seq.Text = string(x.text)
		out[i/N] = append(out[i/N], x.seq)
	}
	return out, nil
}

// prefillMany decodes prompt i into sequence i*n and copies out the logits
// of each prompt's last token into first[i].
func (c *Context) prefillMany(prompts [][]int32, n int, first [][]float32) error {
	parts := make([]prefillPart, len(prompts))
	for i, prompt := range prompts {
		parts[i] = prefillPart{tokens: prompt, seq: i * n}
	}
	return c.prefillPacked(parts, first)
}

// prefillPart is one sequence's prompt to decode: tokens[start:] at
// positions start… into KV sequence seq.
type prefillPart struct {
	tokens []int32
	start  int
	seq    int
}

// prefillPacked decodes every part, packing them into batches of up to
// nBatch tokens, and copies out the logits of each part's last token into
// first[i] (GenerateMany's prompts, GenerateSlots' new suffixes).
func (c *Context) prefillPacked(parts []prefillPart, first [][]float32) error {
	k := 0
	var pending []int // parts whose last token is in the current batch
	var lastIdx []int // … and its batch index
	flush := func() error {
		if k == 0 {
			return nil
		}
		if err := c.decode(k); err != nil {
			return err
		}
		for j, i := range pending {
			l, err := c.logits(lastIdx[j])
			if err != nil {
				return err
			}
			first[i] = append([]float32(nil), l...)
		}
		k, pending, lastIdx = 0, pending[:0], lastIdx[:0]
		return nil
	}
	for i, pt := range parts {
		for pos := pt.start; pos < len(pt.tokens); pos++ {
			last := pos == len(pt.tokens)-1
			c.setBatch(k, pt.tokens[pos], pos, pt.seq, last)
			if last {
				pending = append(pending, i)
				lastIdx = append(lastIdx, k)
			}
			k++
			if k == c.nBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// sampleLoop samples every sequence's first token from first(i), then
// advances all unfinished sequences by one token per llama_decode until
// each is done (an EOG token, a stop string, its token limit). place(i)
// puts sequence i's last sampled token in the batch: its KV sequence and
// position. decoded, when not nil, is called for every sequence a decode
// advanced. The logits are read in place from llama.cpp's buffer (no
// copy) and sampled in parallel over the context's threads (sampleRows);
// honours ctx between decodes.
func (c *Context) sampleLoop(ctx context.Context, st []*genState, p *SampleParams, maxStop int,
	first func(i int) []float32, place func(i int) (seq, pos int), decoded func(i int)) error {
	ss := make([]*sampler, 0, len(st))
	toks := make([]int32, len(st))
	lps := make([]float32, len(st))
	active := make([]int, 0, len(st))
	step := func(row func(k int) []float32) error {
		ss = ss[:0]
		for _, i := range active {
			ss = append(ss, st[i].s)
		}
		if err := sampleRows(ss, row, c.threads, &c.sampleScratch, toks, lps); err != nil {
			return err
		}
		for k, i := range active {
			st[i].accept(c.model, p, maxStop, toks[k], lps[k])
		}
		return nil
	}
	for i := range st {
		active = append(active, i)
	}
	if err := step(func(k int) []float32 { return first(active[k]) }); err != nil {
		return err
	}
	V := c.model.info.NVocab
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		active = active[:0]
		for i, x := range st {
			if !x.done {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			return nil
		}
		for k, i := range active {
			seq, pos := place(i)
			c.setBatch(k, st[i].seq.Tokens[len(st[i].seq.Tokens)-1], pos, seq, true)
		}
		if err := c.decode(len(active)); err != nil {
			return err
		}
		if decoded != nil {
			for _, i := range active {
				decoded(i)
			}
		}
		all, err := c.allLogits(len(active))
		if err != nil {
			return err
		}
		if err := step(func(k int) []float32 { return all[k*V : (k+1)*V] }); err != nil {
			return err
		}
	}
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// stopLen checks p.Stop and returns the byte length of its longest string.
func stopLen(p SampleParams) (int, error) {
	n := 0
	for _, s := range p.Stop {
		if s == "" {
			return 0, fmt.Errorf("%w: empty stop string", ErrInvalidArgument)
		}
		n = max(n, len(s))
	}
	return n, nil
}

// genState is one sequence being sampled by sampleLoop.
type genState struct {
	s      *sampler
	text   []byte // detokenized continuation so far
	done   bool
	seq    Sequence
	pos0   int // position of the first generated token (Generate)
	maxTok int
}

// accept appends a sampled token and its raw log-prob, and ends the sequence
// on an end-of-generation token (unless p.IgnoreEOG), a stop string (cut
// from Text; maxStop is the longest stop string's length, so only the text's
// tail is searched) or after maxTok tokens.
func (x *genState) accept(m *Model, p *SampleParams, maxStop int, tok int32, lp float32) {
	x.seq.Tokens = append(x.seq.Tokens, tok)
	x.seq.LogProbs = append(x.seq.LogProbs, lp)
	if !p.IgnoreEOG && m.isEOG(tok) {
		x.done, x.seq.Finish = true, FinishEOG
		return
	}
	before := len(x.text)
	x.text = append(x.text, m.pieces[tok]...)
	if maxStop > 0 {
		from := max(0, before-maxStop+1)
		for _, stop := range p.Stop {
			if j := strings.Index(string(x.text[from:]), stop); j >= 0 {
				x.text = x.text[:from+j]
				x.done, x.seq.Finish = true, FinishStop
				return
			}
		}
	}
	if len(x.seq.Tokens) >= x.maxTok {
		x.done, x.seq.Finish = true, FinishLength
	}
}
