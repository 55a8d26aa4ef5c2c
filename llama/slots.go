package llama

/*
#include "llama.h"
*/
import "C"

import (
	"context"
	"fmt"
)

// Slots: many conversations, each in its own KV sequence that persists
// across calls. An agent episode keeps one slot for its whole life; every
// turn it asks for a continuation of its full prompt (history + new
// observation), and only the tokens past what its sequence already holds
// are decoded. All requests of a call are prefilled together (their new
// suffixes packed into shared llama_decode batches) and then decoded
// together, one token per request per llama_decode.
//
//	slot s KV:   [ t0 t1 … t(k-1) ]            tokens held (positions 0..k-1)
//	request s:   [ t0 t1 … t(n-1) | p(n) … ]   n = longest common prefix (≤ len(prompt)-1)
//	→ llama_memory_seq_rm(s, n, -1), decode p(n)… at positions n…, then sample
//
// The held tokens are valid only under the adapter state they were computed
// with: any adapter change (attach, detach, rescale, weight write) empties
// every slot on the next call, as do Generate, GenerateMany, Score and
// Logits (they use the KV cache themselves).

// SlotRequest asks for one continuation in a slot.
type SlotRequest struct {
	// Slot is the KV sequence id, in [0, NSeqMax); distinct per call.
	Slot int
	// Prompt is the whole prompt (not only what is new).
	Prompt []int32
	// MaxTokens overrides SampleParams.MaxTokens when > 0.
	MaxTokens int
	// Seed and Stream seed this request's sampler: its own generator
	// seeded with (Seed, Stream), so a request samples the same tokens
	// whatever else is in the batch and whichever slot it uses.
	Seed   uint64
	Stream int
}

// SlotStats counts the prompt tokens of a GenerateSlots call.
type SlotStats struct {
	Requests      int
	PromptSeen    int // sum of the prompts' lengths
	PromptDecoded int // prompt tokens actually decoded (the rest came from the slots' KV)
	Generated     int // sampled tokens
}

// slotSet is what each sequence of the KV cache holds.
type slotSet struct {
	sig  uint64    // adapter state the contents were computed under
	held [][]int32 // held[s]: tokens of sequence s at positions 0..len-1
	last SlotStats
}

// slotState validates (or resets) the slot bookkeeping for the current
// adapter state.
func (c *Context) slotState() *slotSet {
	sig := c.adapterSig()
	if c.slots == nil || c.slots.sig != sig || len(c.slots.held) != c.nSeqMax {
		c.clearKV()
		c.slots = &slotSet{sig: sig, held: make([][]int32, c.nSeqMax)}
	}
	return c.slots
}

// ClearSlot empties one slot (its episode is over). Out-of-range slots are
// an error.
func (c *Context) ClearSlot(slot int) error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if slot < 0 || slot >= c.nSeqMax {
		return fmt.Errorf("%w: slot %d not in [0, %d)", ErrInvalidArgument, slot, c.nSeqMax)
	}
	if c.slots == nil {
		return nil
	}
	C.llama_memory_seq_rm(C.llama_get_memory(c.c), C.llama_seq_id(slot), -1, -1)
	c.slots.held[slot] = nil
	return nil
}

// ClearSlots empties every slot (and the whole KV cache).
func (c *Context) ClearSlots() error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	c.clearKV()
	return nil
}

// SlotTokens returns a copy of the tokens slot holds in the KV cache (nil
// when none or unknown).
func (c *Context) SlotTokens(slot int) []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots == nil || slot < 0 || slot >= len(c.slots.held) {
		return nil
	}
	return append([]int32(nil), c.slots.held[slot]...)
}

// LastSlotStats returns the counts of the last GenerateSlots call.
func (c *Context) LastSlotStats() SlotStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots == nil {
		return SlotStats{}
	}
	return c.slots.last
}

// GenerateSlots samples one continuation per request, each in its own slot
// (see the file comment): out[i] answers reqs[i]. Log-probs are those of
// the raw model (temperature 1, no truncation), as Generate's. p.N must be
// 0 or 1; p.Seed and p.SeqOffset are replaced by each request's Seed and
// Stream. It honours ctx between decode steps; on any error every slot is
// emptied.
func (c *Context) GenerateSlots(ctx context.Context, reqs []SlotRequest, p SampleParams) ([]Sequence, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.embd {
		return nil, fmt.Errorf("%w: embeddings context cannot generate", ErrInvalidArgument)
	}
	switch {
	case len(reqs) == 0:
		return nil, fmt.Errorf("%w: no requests", ErrInvalidArgument)
	case len(reqs) > c.nSeqMax:
		return nil, fmt.Errorf("%w: %d requests, NSeqMax %d", ErrInvalidArgument, len(reqs), c.nSeqMax)
	case p.N > 1 || p.N < 0:
		return nil, fmt.Errorf("%w: GenerateSlots samples one sequence per request (N %d)", ErrInvalidArgument, p.N)
	case p.MaxTokens < 0:
		return nil, fmt.Errorf("%w: MaxTokens %d", ErrInvalidArgument, p.MaxTokens)
	case p.TopK < 0:
		return nil, fmt.Errorf("%w: negative TopK", ErrInvalidArgument)
	case !finite(p.TopP) || !finite(p.MinP) || !finite(p.Temperature) || p.TopP < 0 || p.MinP < 0 || p.MinP > 1:
		return nil, fmt.Errorf("%w: TopP %v, MinP %v, Temperature %v", ErrInvalidArgument, p.TopP, p.MinP, p.Temperature)
	}
	maxStop, err := stopLen(p)
	if err != nil {
		return nil, err
	}
	seen := make(map[int]bool, len(reqs))
	maxTok := make([]int, len(reqs))
	for i, r := range reqs {
		if r.Slot < 0 || r.Slot >= c.nSeqMax {
			return nil, fmt.Errorf("%w: request %d: slot %d not in [0, %d)", ErrInvalidArgument, i, r.Slot, c.nSeqMax)
		}
		if seen[r.Slot] {
			return nil, fmt.Errorf("%w: slot %d requested twice", ErrInvalidArgument, r.Slot)
		}
		seen[r.Slot] = true
		if r.MaxTokens < 0 {
			return nil, fmt.Errorf("%w: request %d: MaxTokens %d", ErrInvalidArgument, i, r.MaxTokens)
		}
		maxTok[i] = p.MaxTokens
		if r.MaxTokens > 0 {
			maxTok[i] = r.MaxTokens
		}
		if err := c.checkPrompt(r.Prompt, maxTok[i]); err != nil {
			return nil, fmt.Errorf("request %d (slot %d): %w", i, r.Slot, err)
		}
		if maxTok[i] == 0 {
			maxTok[i] = c.nCtxSeq - len(r.Prompt)
		}
		if maxTok[i] == 0 {
			return nil, fmt.Errorf("%w: request %d: prompt fills the context", ErrContextFull, i)
		}
	}
	c.kvValid = false // sequence 0 may be overwritten: Generate's prefix cache is gone
	ss := c.slotState()
	fail := func(err error) ([]Sequence, error) {
		c.clearKV()
		return nil, err
	}

	// keep each slot's longest common prefix with its prompt (at least the
	// last prompt token is decoded again, for its logits)
	mem := C.llama_get_memory(c.c)
	start := make([]int, len(reqs))
	stats := SlotStats{Requests: len(reqs)}
	for i, r := range reqs {
		held := ss.held[r.Slot]
		n := 0
		for n < len(held) && n < len(r.Prompt)-1 && held[n] == r.Prompt[n] {
			n++
		}
		if n < len(held) && !bool(C.llama_memory_seq_rm(mem, C.llama_seq_id(r.Slot), C.llama_pos(n), -1)) {
			// partial removal unsupported (e.g. recurrent state): start over
			C.llama_memory_seq_rm(mem, C.llama_seq_id(r.Slot), -1, -1)
			n = 0
		}
		ss.held[r.Slot] = held[:n]
		start[i] = n
		stats.PromptSeen += len(r.Prompt)
		stats.PromptDecoded += len(r.Prompt) - n
	}

	// prefill every request's new suffix, packed into batches of nBatch
	first := make([][]float32, len(reqs))
	parts := make([]prefillPart, len(reqs))
	for i, r := range reqs {
		parts[i] = prefillPart{tokens: r.Prompt, start: start[i], seq: r.Slot}
	}
	if err := c.prefillPacked(parts, first); err != nil {
		return fail(err)
	}
	for i, r := range reqs {
		ss.held[r.Slot] = append(ss.held[r.Slot], r.Prompt[start[i]:]...)
	}

	st := make([]*genState, len(reqs))
	for i, r := range reqs {
		q := p
		q.Seed = r.Seed
		st[i] = &genState{s: newSampler(q, r.Stream), maxTok: maxTok[i]}
	}
	// one token per active request: the last sampled one, at the position
	// after what its slot holds; the slot holds it once decoded
	last := func(i int) int32 { return st[i].seq.Tokens[len(st[i].seq.Tokens)-1] }
	err = c.sampleLoop(ctx, st, &p, maxStop, func(i int) []float32 { return first[i] },
		func(i int) (seq, pos int) { return reqs[i].Slot, len(ss.held[reqs[i].Slot]) },
		func(i int) { ss.held[reqs[i].Slot] = append(ss.held[reqs[i].Slot], last(i)) })
	if err != nil {
		return fail(err)
	}
	out := make([]Sequence, len(reqs))
	for i, x := range st {
		x.seq.Text = string(x.text)
		out[i] = x.seq
		stats.Generated += len(x.seq.Tokens)
	}
	ss.last = stats
	return out, nil
}
