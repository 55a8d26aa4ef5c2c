package trainer

import (
	"fmt"
	"slices"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/trainer/optim"
	"github.com/empo2/empo2/trainer/rollout"
)

// Packing.
//
// With full-trajectory history, the prompt of step i+1 is the prompt of
// step i, its response, and the new observation (with the tips retrieved
// for step i+1 when tips stay in every turn: on-policy with tips; the
// off-policy input has no tips at all; only tips in the last turn alone
// break it):
//
//	P_{i+1} = P_i ‖ R_i ‖ obs_{i+1}
//
// so one sequence S = P_n ‖ R_n contains every step's (prompt, response)
// pair, response i at [|P_i|, |P_i|+|R_i|). Attention is causal, so the
// log-prob of every token of R_i in S is exactly its log-prob after P_i.
// With the token-mean loss (Σ over trained tokens / their count) the loss
// and gradient of S with the spans R_1…R_n trained equal those of the n
// per-step sequences, while the forward pass reads |S| tokens instead of
// Σ_i |P_i|+|R_i| ≈ n·|S|/2. TestPackingSameGradients checks this.

// extends reports whether prompt starts with prev (the packed tokens so far).
func extends(prompt, prev []int32) bool {
	return len(prompt) > len(prev) && slices.Equal(prompt[:len(prev)], prev)
}

// appendStep adds step si (training prompt, response) to s: s.Seq.Tokens
// becomes prompt ‖ response (prompt extends the tokens s had), the response
// span is trained with advantage adv and the rollout's old log-probs.
// beh, when non-nil, is the behaviour sequence (prompt with tips ‖
// response) on which π_old is recomputed for this span.
func appendStep(s *Sample, si int, prompt []int32, rec *rollout.StepRecord, adv float32, beh []int32) {
	start := len(prompt)
	n := start + len(rec.Response)
	toks := make([]int32, 0, n)
	toks = append(append(toks, prompt...), rec.Response...)
	grow := func(b []bool) []bool { return append(b, make([]bool, n-len(b))...) }
	growF := func(f []float32) []float32 { return append(f, make([]float32, n-len(f))...) }
	s.Seq.Tokens = toks
	s.Seq.Trained = grow(s.Seq.Trained)
	s.Seq.OldLogp = growF(s.Seq.OldLogp)
	s.Seq.Advantage = growF(s.Seq.Advantage)
	for k := range rec.Response {
		s.Seq.Trained[start+k] = true
		s.Seq.OldLogp[start+k] = rec.OldLogp[k]
		s.Seq.Advantage[start+k] = adv
	}
	s.Steps = append(s.Steps, si)
	s.Spans = append(s.Spans, [2]int{start, n})
	s.behaviour = append(s.behaviour, beh)
}

// recomputeOld replaces the old log-probs of every span by the training
// graph's: on the sample's own tokens when the span has no behaviour
// sequence (unless the sample's oldDeferred: RunUpdates does those), else
// on the behaviour sequence (whose response is its tail). Behaviour
// sequences that extend one another — tips kept in every turn
// (memory.tips_in every-turn, the reference): step j+1's prompt with tips
// is step j's prompt with tips, its response and the new turn — are scored
// as one, the longest: causal attention gives each span's log-probs at its
// own positions there, so an episode costs one forward over its behaviour
// tokens instead of one per turn (quadratic in the turns). Sequences go to
// lp in chunks of microBatch (0: all at once).
func recomputeOld(samples []Sample, lp LogProber, microBatch int) error {
	type member struct{ s, span, end int } // a behaviour span and where its response ends in the chain
	type ref struct {
		s       int
		own     bool     // sample s's whole training sequence
		members []member // else: the behaviour spans scored on this sequence
	}
	var seqs [][]int32
	var want [][]bool // the positions whose log-probs are used: the response rows
	var refs []ref
	// the chain: consecutive behaviour sequences (in sample and span order:
	// an episode's steps in turn, packed or not) each extending the last
	var chain []int32
	var members []member
	flush := func() {
		if chain == nil {
			return
		}
		w := make([]bool, len(chain))
		for _, m := range members {
			sp := samples[m.s].Spans[m.span]
			for t := max(1, m.end-(sp[1]-sp[0])); t < m.end; t++ {
				w[t] = true
			}
		}
		seqs, want = append(seqs, chain), append(want, w)
		refs = append(refs, ref{members: members})
		chain, members = nil, nil
	}
	for i := range samples {
		s := &samples[i]
		own := false
		for j, b := range s.behaviour {
			if b == nil {
				own = true
				continue
			}
			if chain != nil && !extends(b, chain) {
				flush()
			}
			chain = b
			members = append(members, member{i, j, len(b)})
		}
		if own && !s.oldDeferred {
			seqs = append(seqs, s.Seq.Tokens)
			w := make([]bool, len(s.Seq.Tokens))
			for j, sp := range s.Spans {
				if s.behaviour[j] == nil {
					for t := max(1, sp[0]); t < sp[1]; t++ {
						w[t] = true
					}
				}
			}
			want = append(want, w)
			refs = append(refs, ref{s: i, own: true})
		}
	}
	flush()
	rlp, rowsOnly := lp.(RowLogProber)
	if len(seqs) == 0 {
		return nil
	}
	mb := microBatch
	if mb <= 0 {
		mb = len(seqs)
	}
	for lo := 0; lo < len(seqs); lo += mb {
		hi := min(lo+mb, len(seqs))
		var out [][]float32
		var err error
		if rowsOnly {
			out, err = rlp.LogProbsAt(seqs[lo:hi], want[lo:hi])
		} else {
			out, err = lp.LogProbsBatch(seqs[lo:hi])
		}
		if err != nil {
			return fmt.Errorf("%w: recomputing old log-probs: %w", ErrSamples, err)
		}
		if len(out) != hi-lo {
			return fmt.Errorf("%w: %d log-prob rows for %d sequences", ErrSamples, len(out), hi-lo)
		}
		for k, lps := range out {
			r := refs[lo+k]
			if len(lps) != len(seqs[lo+k]) {
				return fmt.Errorf("%w: %d log-probs for %d tokens", ErrSamples, len(lps), len(seqs[lo+k]))
			}
			if r.own {
				s := &samples[r.s]
				for j, sp := range s.Spans {
					if s.behaviour[j] == nil {
						copy(s.Seq.OldLogp[sp[0]:sp[1]], lps[sp[0]:sp[1]])
					}
				}
				continue
			}
			for _, m := range r.members {
				s := &samples[m.s]
				sp := s.Spans[m.span]
				n := sp[1] - sp[0]
				copy(s.Seq.OldLogp[sp[0]:sp[1]], lps[m.end-n:m.end])
			}
		}
	}
	return nil
}

// recomputeOwnOld recomputes π_old on the own spans (no behaviour
// sequence) of the deferred samples idx, in the micro-batches that
// optim.Updater.Update will cut from the same mini-batch (the same sequences in
// the same order, MicroBatch at a time): each micro-batch's forward pass is
// then the graph batch that Update's ForwardBackward builds, so before the
// first optimizer step π_θ = π_old bit for bit (ratios exactly 1) and later
// ratios differ from 1 by the updates alone. idx is the mini-batch in
// Update's order.
func recomputeOwnOld(u *optim.Updater, lp ExactLogProber, samples []Sample, idx []int) error {
	ucfg := u.Config()
	mb := ucfg.MicroBatch
	if mb <= 0 || mb > len(idx) {
		mb = len(idx)
	}
	for lo := 0; lo < len(idx); lo += mb {
		chunk := idx[lo:min(lo+mb, len(idx))]
		deferred := false
		batch := make([]cgo.Sequence, len(chunk))
		for k, i := range chunk {
			batch[k] = samples[i].Seq
			deferred = deferred || samples[i].oldDeferred
		}
		if !deferred {
			continue
		}
		if t, _ := cgo.CountTrained(batch); t == 0 {
			continue // Update skips this micro-batch too
		}
		out, err := lp.TrainedLogProbs(batch, ucfg.Objective)
		if err != nil {
			return fmt.Errorf("%w: recomputing old log-probs: %w", ErrSamples, err)
		}
		if len(out) != len(chunk) {
			return fmt.Errorf("%w: %d log-prob rows for %d sequences", ErrSamples, len(out), len(chunk))
		}
		for k, i := range chunk {
			s := &samples[i]
			if !s.oldDeferred || out[k] == nil {
				continue
			}
			if len(out[k]) != len(s.Seq.Tokens) {
				return fmt.Errorf("%w: %d log-probs for %d tokens", ErrSamples, len(out[k]), len(s.Seq.Tokens))
			}
			for j, sp := range s.Spans {
				if s.behaviour[j] == nil {
					copy(s.Seq.OldLogp[sp[0]:sp[1]], out[k][sp[0]:sp[1]])
				}
			}
		}
	}
	return nil
}
