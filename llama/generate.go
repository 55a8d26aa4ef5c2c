package llama

import (
	"context"
	"fmt"
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
// once into sequence 0, its KV cache is copied to the other sequences
// (llama_memory_seq_cp), and then all unfinished sequences advance by one
// token per llama_decode. It honours ctx cancellation between steps.
func (c *Context) Generate(ctx context.Context, prompt []int32, p SampleParams) ([]Sequence, error) {
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
	case p.N < 0 || p.N > c.nSeqMax:
		return nil, fmt.Errorf("%w: N %d not in [1, NSeqMax %d]", ErrInvalidArgument, p.N, c.nSeqMax)
	case p.MaxTokens < 0:
		return nil, fmt.Errorf("%w: MaxTokens %d", ErrInvalidArgument, p.MaxTokens)
	case p.TopK < 0 || p.SeqOffset < 0:
		return nil, fmt.Errorf("%w: negative TopK or SeqOffset", ErrInvalidArgument)
	case p.TopP < 0 || p.MinP < 0 || p.MinP > 1 || p.Temperature != p.Temperature:
		return nil, fmt.Errorf("%w: TopP %v, MinP %v, Temperature %v", ErrInvalidArgument, p.TopP, p.MinP, p.Temperature)
	}
	if err := c.checkPrompt(prompt, p.MaxTokens); err != nil {
		return nil, err
	}
	maxTok := p.MaxTokens
	if maxTok == 0 {
		maxTok = c.nCtxSeq - len(prompt)
	}
	if maxTok == 0 {
		return nil, fmt.Errorf("%w: prompt fills the context", ErrContextFull)
	}
	maxStop := 0
	for _, s := range p.Stop {
		if s == "" {
			return nil, fmt.Errorf("%w: empty stop string", ErrInvalidArgument)
		}
		maxStop = max(maxStop, len(s))
	}

	c.clearKV()
	if err := c.prefill(prompt, 0); err != nil {
		return nil, err
	}
	mem := c.memory()
	for i := 1; i < p.N; i++ {
		mem.seqCopy(0, i)
	}

	type state struct {
		s    *sampler
		text []byte
		done bool
		seq  Sequence
	}
	st := make([]*state, p.N)
	for i := range st {
		st[i] = &state{s: newSampler(p, p.SeqOffset+i)}
	}
	vocab := c.model
	// accept appends a sampled token to sequence i.
	accept := func(i int, tok int32, lp float32) {
		x := st[i]
		x.seq.Tokens = append(x.seq.Tokens, tok)
		x.seq.LogProbs = append(x.seq.LogProbs, lp)
		if !p.IgnoreEOG && vocab.isEOG(tok) {
			x.done, x.seq.Finish = true, FinishEOG
			return
		}
		before := len(x.text)
		x.text = append(x.text, vocab.pieces[tok]...)
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
		if len(x.seq.Tokens) >= maxTok {
			x.done, x.seq.Finish = true, FinishLength
		}
	}

	// first token of every sequence from the prompt's last logits
	logits, err := c.logits(-1)
	if err != nil {
		return nil, err
	}
	for i := range st {
		tok, lp, err := st[i].s.sample(logits)
		if err != nil {
			return nil, err
		}
		accept(i, tok, lp)
	}
	active := make([]int, 0, p.N)
	for step := 1; ; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		active = active[:0]
		for i, x := range st {
			if !x.done {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			break
		}
		pos := len(prompt) + step - 1
		for k, i := range active {
			c.setBatch(k, st[i].seq.Tokens[step-1], pos, i, true)
		}
		if err := c.decode(len(active)); err != nil {
			return nil, err
		}
		all, err := c.allLogits(len(active))
		if err != nil {
			return nil, err
		}
		V := c.model.info.NVocab
		for k, i := range active {
			tok, lp, err := st[i].s.sample(all[k*V : (k+1)*V])
			if err != nil {
				return nil, err
			}
			accept(i, tok, lp)
		}
	}
	out := make([]Sequence, p.N)
	for i, x := range st {
		out[i] = x.seq
		out[i].Text = string(x.text)
	}
	return out, nil
}
