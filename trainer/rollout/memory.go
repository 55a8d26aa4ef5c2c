package rollout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
)

// OpenEmbedder makes the retrieval embedder that mc.Embedder names, reading
// the first mc.KeyPieces pieces of each text: "hash" is memstore's built-in
// hash embedder (384 dims; pieces: memstore.CutPieces); "policy" mean-pools
// the policy model's own hidden states (base weights,
// llama.NewEmbedderFromModel; pieces: the model's tokens); anything else is
// the path of a BERT-type (or any) GGUF embedding model (llama.NewEmbedder;
// pieces: its tokens, [CLS] and [SEP] included as MiniLM counts them, and
// never more than its learned positions). close releases it.
func OpenEmbedder(mc MemoryConfig, policy *llama.Model, threads int) (emb memstore.Embedder, close func() error, err error) {
	nop := func() error { return nil }
	if mc.KeyPieces < 1 {
		return nil, nil, fmt.Errorf("%w: memory.key_pieces %d (want ≥ 1)", ErrRollout, mc.KeyPieces)
	}
	opts := llama.EmbedderOptions{Threads: threads, MaxTokens: mc.KeyPieces}
	switch mc.Embedder {
	case EmbedderHash:
		return memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(mc.KeyPieces), nop, nil
	case "":
		return nil, nil, fmt.Errorf("%w: memory.embedder is empty", ErrRollout)
	case EmbedderPolicy:
		if policy == nil {
			return nil, nil, fmt.Errorf("%w: embedder \"policy\" needs the policy model", ErrRollout)
		}
		e, err := llama.NewEmbedderFromModel(policy, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: policy embedder: %w", ErrRollout, err)
		}
		return e, e.Close, nil
	}
	name := mc.Embedder
	e, err := llama.NewEmbedder(name, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: embedder %s: %w", ErrRollout, name, err)
	}
	return e, e.Close, nil
}

// WriteTips asks the policy, in a new user turn after each episode's chat,
// for a one-line tip (TipMessages: the episode's history with the tips it
// kept, the final observation, then TipRequest; at most tip_max_tokens,
// stopping at the end of the line; batched over episodes in slots, so an
// episode's KV is reused when its slot still holds it), sets Episode.Tip,
// and stores one entry per step (EpisodeEntries: key = the episode's final
// conversation under memory.key "conversation", that step's key under
// "observation"; content = tip + the step's action + the final score;
// score = final score; stamped with trainStep) in the episode's namespace.
// An episode whose tip is empty after CleanTip gets a plain fallback tip
// (its final score and length), so every episode with steps writes
// exactly one tip. With rollout.oracle_tips the tip is Options.OracleTip
// of the episode's trajectory instead (nothing is generated). written
// counts the entries the store added (duplicates skipped). The duration is
// LastTipsDuration.
func (r *Roller) WriteTips(ctx context.Context, eps []Episode, trainStep int64) (written int, err error) {
	t0 := time.Now()
	defer func() { r.tipsDur = time.Since(t0) }()
	if r.opts.Memory == nil || r.opts.ReadOnlyMemory {
		return 0, fmt.Errorf("%w: WriteTips", ErrNoMemory)
	}
	var idx []int
	for i := range eps {
		if len(eps[i].Steps) > 0 {
			idx = append(idx, i)
		}
	}
	nSlots := r.lctx.NSeqMax()
	for lo := 0; lo < len(idx); lo += nSlots {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		chunk := idx[lo:min(lo+nSlots, len(idx))]
		reqs := make([]llama.SlotRequest, 0, len(chunk))
		used := map[int]bool{}
		reqOf := map[int]int{} // episode index → request index
		var free []int
		for s := 0; s < nSlots; s++ {
			free = append(free, s)
		}
		for _, i := range chunk {
			if r.cfg.OracleTips {
				continue // the oracle tip below: nothing to generate
			}
			ct, err := r.tipPrompt(&eps[i])
			if err != nil {
				return written, err
			}
			slot := eps[i].slot
			if slot < 0 || slot >= nSlots || used[slot] {
				for used[free[0]] {
					free = free[1:]
				}
				slot = free[0]
			}
			used[slot] = true
			maxTok := min(r.cfg.TipMaxTokens, r.lctx.NCtxSeq()-len(ct.Tokens))
			if maxTok < 1 {
				continue // no room: the fallback tip below
			}
			reqs = append(reqs, llama.SlotRequest{
				Slot: slot, Prompt: ct.Tokens, MaxTokens: maxTok,
				Seed: MixSeed(r.opts.Seed, eps[i].Seed), Stream: 1 << 20, // past any turn's stream
			})
			reqOf[i] = len(reqs) - 1
		}
		var seqs []llama.Sequence
		if len(reqs) > 0 {
			seqs, err = r.lctx.GenerateSlots(ctx, reqs, llama.SampleParams{
				Temperature: float32(r.tipTemperature()), MaxTokens: r.cfg.TipMaxTokens, Stop: []string{"\n"},
			})
			if err != nil {
				return written, fmt.Errorf("%w: tip generation: %w", ErrRollout, err)
			}
		}
		for _, i := range chunk {
			ep := &eps[i]
			tip := ""
			if k, ok := reqOf[i]; ok {
				tip = CleanTip(seqs[k].Text)
			}
			if r.cfg.OracleTips {
				tip = CleanTip(r.opts.OracleTip(ep.Trajectory()))
			}
			if tip == "" {
				tip = fmt.Sprintf("I ended with a score of %s after %d steps.", strconv.FormatFloat(ep.Score, 'g', 4, 64), len(ep.Steps))
			}
			ep.Tip = tip
			final := ""
			if r.opts.MemoryConfig.Key == KeyConversation {
				final = StepKey(KeyConversation, r.cfg.Prompt, ep.TaskDesc, ep.FirstObs, r.turns(ep))
			}
			steps := make([]TipStep, len(ep.Steps))
			for s, rec := range ep.Steps {
				steps[s] = TipStep{Context: rec.Key, Action: rec.Action}
				if final != "" {
					steps[s].Context = final
				}
			}
			id := fmt.Sprintf("step%d/%s/g%d/s%d", trainStep, ep.Namespace(), ep.Group, ep.Seed)
			n, err := r.opts.Memory.Add(ctx, ep.Namespace(), EpisodeEntries(tip, steps, ep.Score, trainStep, id))
			if err != nil {
				return written, fmt.Errorf("%w: storing tips: %w", ErrRollout, err)
			}
			written += n
		}
	}
	return written, nil
}

// tipTemperature is the sampling temperature of tip writing: the rollout
// temperature (the reference), unless TipTemperature ≥ 0 sets its own.
func (r *Roller) tipTemperature() float64 {
	if r.cfg.TipTemperature >= 0 {
		return r.cfg.TipTemperature
	}
	return r.cfg.Temperature
}

// LastTipsDuration is how long the last WriteTips took (Stats.TTips).
func (r *Roller) LastTipsDuration() time.Duration { return r.tipsDur }

// turns are an episode's turns as its prompts showed them (with the tips of
// each turn under memory.tips_in every-turn).
func (r *Roller) turns(ep *Episode) []Turn {
	turns := make([]Turn, len(ep.Steps))
	for i, s := range ep.Steps {
		turns[i] = Turn{Action: s.Text, Observation: s.Observation}
		if r.opts.MemoryConfig.TipsIn == TipsEveryTurn {
			turns[i].Tips = s.Tips
		}
	}
	return turns
}

// tipPrompt renders the tip request after an episode's history.
func (r *Roller) tipPrompt(ep *Episode) (ChatTokens, error) {
	turns := r.turns(ep)
	resps := make([][]int32, len(ep.Steps))
	for i, s := range ep.Steps {
		resp := s.Response
		if n := len(resp); n > 0 && r.rend.Model().IsEOG(resp[n-1]) {
			resp = resp[:n-1]
		}
		resps[i] = resp
	}
	pc := r.cfg.Prompt
	if pc.History == HistoryLast && len(turns) > pc.HistoryK {
		resps = resps[len(turns)-pc.HistoryK:]
	}
	msgs := TipMessages(pc, ep.TaskDesc, ep.FirstObs, turns)
	ct, err := r.rend.TokensWithResponses(msgs, resps, true)
	if err != nil {
		return ct, fmt.Errorf("%w: tip prompt: %w", ErrRollout, err)
	}
	return ct, nil
}
