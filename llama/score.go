package llama

import (
	"context"
	"fmt"
)

// ScorePair is one (prompt, continuation) pair for ScoreBatch.
type ScorePair struct {
	Prompt, Continuation []int32
}

// Score returns log p(continuation[i] | prompt, continuation[:i]) for every
// continuation token, by teacher forcing, under the raw model (log-softmax
// at temperature 1) with the context's current adapters.
func (c *Context) Score(ctx context.Context, prompt, continuation []int32) ([]float32, error) {
	out, err := c.ScoreBatch(ctx, []ScorePair{{prompt, continuation}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ScoreBatch scores many pairs. Pairs are packed into llama_decode calls
// of at most NBatch tokens and NSeqMax sequences (one sequence per pair);
// a pair longer than NBatch is decoded alone in chunks.
func (c *Context) ScoreBatch(ctx context.Context, pairs []ScorePair) ([][]float32, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.embd {
		return nil, fmt.Errorf("%w: embeddings context cannot score", ErrInvalidArgument)
	}
	for i, pr := range pairs {
		if err := c.checkPrompt(pr.Prompt, len(pr.Continuation)); err != nil {
			return nil, fmt.Errorf("pair %d: %w", i, err)
		}
		if err := c.model.checkTokens(pr.Continuation); err != nil {
			return nil, fmt.Errorf("pair %d: %w", i, err)
		}
	}
	out := make([][]float32, len(pairs))
	for i := 0; i < len(pairs); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// pack pairs i..j-1
		j, total := i, 0
		for j < len(pairs) && j-i < c.nSeqMax {
			n := len(pairs[j].Prompt) + len(pairs[j].Continuation)
			if total+n > c.nBatch && j > i {
				break
			}
			total += n
			j++
			if total > c.nBatch {
				break // a long pair alone, chunked
			}
		}
		if err := c.scoreGroup(pairs[i:j], out[i:j]); err != nil {
			return nil, err
		}
		i = j
	}
	return out, nil
}

// scoreGroup decodes pairs as sequences 0..len-1 from an empty cache.
func (c *Context) scoreGroup(pairs []ScorePair, out [][]float32) error {
	c.clearKV()
	type slot struct{ pair, j int } // output predicts pairs[pair].Continuation[j]
	var slots []slot
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := c.decode(n); err != nil {
			return err
		}
		k := 0
		for bi := 0; bi < n; bi++ {
			if !c.batchWantsLogits(bi) {
				continue
			}
			s := slots[k]
			k++
			l, err := c.logits(bi)
			if err != nil {
				return err
			}
			out[s.pair][s.j] = LogSoftmax(l, pairs[s.pair].Continuation[s.j])
		}
		slots = slots[:0]
		n = 0
		return nil
	}
	for pi, pr := range pairs {
		out[pi] = make([]float32, len(pr.Continuation))
		P, C := len(pr.Prompt), len(pr.Continuation)
		if C == 0 {
			continue
		}
		for pos := 0; pos < P+C-1; pos++ {
			var tok int32
			if pos < P {
				tok = pr.Prompt[pos]
			} else {
				tok = pr.Continuation[pos-P]
			}
			want := pos >= P-1
			c.setBatch(n, tok, pos, pi, want)
			if want {
				slots = append(slots, slot{pi, pos - P + 1})
			}
			n++
			if n == c.nBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
