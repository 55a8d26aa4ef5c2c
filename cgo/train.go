package cgo

/*
#include "empo_train.h"
*/
import "C"

import "fmt"

// The objective over a batch: validation, the plan of its graphs, and the
// per-graph coefficient callback that runs between forward and backward.

// logpSlack tolerates log-probs a rounding error above 0 (p ≈ 1 computed as
// logit − logsumexp); anything larger is not a log-probability.
const logpSlack = 1e-3

func validateSequence(i int, s *Sequence, obj Objective, V int) error {
	L := len(s.Tokens)
	if L < 2 {
		return fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, L)
	}
	if len(s.Trained) != L || len(s.OldLogp) != L || len(s.Advantage) != L {
		return fmt.Errorf("%w: sequence %d: Trained/OldLogp/Advantage lengths %d/%d/%d, want %d",
			ErrShape, i, len(s.Trained), len(s.OldLogp), len(s.Advantage), L)
	}
	if s.RefLogp != nil && len(s.RefLogp) != L {
		return fmt.Errorf("%w: sequence %d: RefLogp length %d, want %d", ErrShape, i, len(s.RefLogp), L)
	}
	if obj.KLCoef != 0 && s.RefLogp == nil {
		return fmt.Errorf("%w: sequence %d: KLCoef is set but RefLogp is nil", ErrShape, i)
	}
	if s.Trained[0] {
		return fmt.Errorf("%w: sequence %d: Trained[0] is set but the first token has no prediction", ErrShape, i)
	}
	for t, tok := range s.Tokens {
		if tok < 0 || int(tok) >= V {
			return fmt.Errorf("%w: sequence %d: token id %d at %d is outside the vocabulary [0, %d)", ErrShape, i, tok, t, V)
		}
	}
	for t := 1; t < L; t++ {
		if !s.Trained[t] {
			continue
		}
		if !finite32(s.OldLogp[t]) || s.OldLogp[t] > logpSlack {
			return fmt.Errorf("%w: sequence %d: OldLogp[%d] = %v (must be finite and ≤ 0)", ErrNonFinite, i, t, s.OldLogp[t])
		}
		if !finite32(s.Advantage[t]) {
			return fmt.Errorf("%w: sequence %d: Advantage[%d] = %v", ErrNonFinite, i, t, s.Advantage[t])
		}
		if s.RefLogp != nil && obj.KLCoef != 0 && (!finite32(s.RefLogp[t]) || s.RefLogp[t] > logpSlack) {
			return fmt.Errorf("%w: sequence %d: RefLogp[%d] = %v", ErrNonFinite, i, t, s.RefLogp[t])
		}
	}
	return nil
}

// ForwardBackward evaluates the clipped policy-gradient objective on batch
// and adds lossScale·∂L/∂θ into the gradient accumulators (see Objective and
// docs/training.md). lossScale 0 means the batch is the whole mini-batch
// (1/Tokens for token-mean, 1/Sequences for seq-mean-token-mean). When the
// batch's training graph exceeds the compute cap it is split over several
// graphs (see LogProbsAt); the objective is a sum over tokens with fixed
// weights, so the accumulated gradient is the same up to float rounding,
// and a failure in any graph leaves the accumulators as they were.
func (M *Model) ForwardBackward(batch []Sequence, obj Objective, lossScale float32) (Stats, error) {
	m, err := M.lock()
	if err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	return m.objective(batch, obj, lossScale, true)
}

// Evaluate is ForwardBackward without the backward pass: the same Stats
// (loss value, clip fractions, KL, entropy) and no change to the gradients.
func (M *Model) Evaluate(batch []Sequence, obj Objective, lossScale float32) (Stats, error) {
	m, err := M.lock()
	if err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	return m.objective(batch, obj, lossScale, false)
}

// objPlan is a batch laid out for the objective exactly as ForwardBackward
// and Evaluate do: sequences with no trained token are left out.
type objPlan struct {
	kept  []int     // batch index of each kept sequence
	nTok  []int     // its trained tokens
	seqs  [][]int32 // its tokens
	rows  [][]int   // its trained positions
	parts [][]span  // graphs over (kept index, rows), planned with the training graph
}

// planObjective validates batch and plans its graphs. st holds Tokens and
// Sequences; pl.parts is empty when batch has no trained token.
func (m *model) planObjective(batch []Sequence, obj Objective) (pl objPlan, st Stats, err error) {
	if len(batch) == 0 {
		return pl, st, fmt.Errorf("%w: empty batch", ErrShape)
	}
	for i := range batch {
		if err := validateSequence(i, &batch[i], obj, m.info.NVocab); err != nil {
			return pl, st, err
		}
	}
	for i := range batch {
		n := trainedCount(&batch[i])
		if n == 0 {
			continue
		}
		s := &batch[i]
		var r []int
		for t := 1; t < len(s.Tokens); t++ {
			if s.Trained[t] {
				r = append(r, t)
			}
		}
		pl.kept = append(pl.kept, i)
		pl.nTok = append(pl.nTok, n)
		pl.seqs = append(pl.seqs, s.Tokens)
		pl.rows = append(pl.rows, r)
		st.Tokens += n
	}
	st.Sequences = len(pl.kept)
	if st.Tokens == 0 {
		return pl, st, nil
	}
	pl.parts, err = m.plan(pl.seqs, pl.rows, true)
	return pl, st, err
}

// TrainedLogProbs is the forward pass of ForwardBackward(batch, obj, ·)
// without the objective: out[i][t] = log π(Tokens[t] | Tokens[:t]) at every
// trained position t of sequence i (0 elsewhere; out[i] is nil for a
// sequence with no trained token). The graphs (sequences, cut lengths, padding, rows) are the ones
// ForwardBackward builds for the same batch, so the values are bit-identical
// to the log-probs ForwardBackward computes with the same parameters: π_old
// recomputed this way gives ratios of exactly 1 before the first update.
func (M *Model) TrainedLogProbs(batch []Sequence, obj Objective) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if obj, err = validateObjective(obj); err != nil {
		return nil, err
	}
	pl, st, err := m.planObjective(batch, obj)
	out := make([][]float32, len(batch))
	if err != nil || st.Tokens == 0 {
		return out, err
	}
	for _, i := range pl.kept {
		out[i] = make([]float32, len(batch[i].Tokens))
	}
	err = m.forwardParts(pl.seqs, pl.rows, pl.parts, func(k, t int, lp float32) { out[pl.kept[k]][t] = lp })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// testFailGraph, set by tests only, makes the objective fail in graph k of
// a call when it returns an error (to exercise the multi-graph restore).
var testFailGraph func(k int) error

func (m *model) objective(batch []Sequence, obj Objective, lossScale float32, withBackward bool) (st Stats, err error) {
	if obj, err = validateObjective(obj); err != nil {
		return st, err
	}
	if !finite32(lossScale) || lossScale < 0 {
		return st, fmt.Errorf("%w: loss scale %v (must be finite and ≥ 0)", ErrNonFinite, lossScale)
	}
	pl, st, err := m.planObjective(batch, obj)
	if err != nil || st.Tokens == 0 {
		return st, err
	}
	scale := float64(lossScale)
	if scale == 0 {
		if obj.Aggregation == AggTokenMean {
			scale = 1 / float64(st.Tokens)
		} else {
			scale = 1 / float64(st.Sequences)
		}
	}
	// ---- objective in float64; coefficients for the backward surrogate.
	// For a training step this runs inside the graph compute (coefficient
	// callback), between the forward and the backward nodes, once per graph
	// of the plan.
	var nClip, nDual int
	coefs := func(k int, part []span) coefFunc {
		return func(logp, ent, cLogp, cEnt []float32) error {
			if testFailGraph != nil {
				if err := testFailGraph(k); err != nil {
					return err
				}
			}
			j := 0
			for _, sp := range part {
				s := &batch[pl.kept[sp.seq]]
				w := scale
				if obj.Aggregation == AggSeqMeanTokenMean {
					w = scale / float64(pl.nTok[sp.seq])
				}
				for _, t := range pl.rows[sp.seq][sp.lo:sp.hi] {
					var ref float64
					if s.RefLogp != nil {
						ref = float64(s.RefLogp[t])
					}
					tt := tokenObjective(obj, float64(logp[j]), float64(s.OldLogp[t]), float64(s.Advantage[t]), ref, s.RefLogp != nil, float64(ent[j]))
					st.Loss += w * tt.loss
					st.PolicyLoss += tt.pg
					st.ApproxKL += tt.k3
					st.ApproxKLK1 += tt.k1
					st.RefKL += tt.refKL
					st.Entropy += tt.entropy
					st.LogpMean += tt.logp
					if tt.clipped {
						nClip++
					}
					if tt.dualClip {
						nDual++
					}
					cLogp[j] = float32(w * tt.dLogp)
					cEnt[j] = float32(w * tt.dEnt)
					j++
				}
			}
			return nil
		}
	}
	if withBackward && len(pl.parts) > 1 {
		// several graphs: a failure in a later one must undo the earlier ones
		if rc := C.empo_model_grad_save(m.c); rc != C.EMPO_OK {
			return st, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
		}
		defer func() {
			if err != nil {
				if rc := C.empo_model_grad_restore(m.c); rc != C.EMPO_OK {
					err = fmt.Errorf("%w (and restoring the gradients failed: %w)", err, statusErr(rc, C.GoString(C.empo_model_last_error(m.c))))
				}
			}
		}()
	}
	var cm C.struct_empo_model_mem
	C.empo_model_get_mem(m.c, &cm)
	skips0 := int64(cm.loss_scale_skips)
	for k, part := range pl.parts {
		p, err := m.packSpans(pl.seqs, pl.rows, part)
		if err != nil {
			return st, err
		}
		st.PaddedTokens += p.B * p.T
		if withBackward {
			if _, _, err := m.forward(p, coefs(k, part)); err != nil {
				return st, err
			}
		} else {
			logp, ent, err := m.forward(p, nil)
			if err != nil {
				return st, err
			}
			if err := coefs(k, part)(logp, ent, make([]float32, len(logp)), make([]float32, len(logp))); err != nil {
				return st, err
			}
		}
		C.empo_model_get_mem(m.c, &cm)
		st.ComputeBytes = max(st.ComputeBytes, int64(cm.compute_last))
		st.LossScaleSkips = int(int64(cm.loss_scale_skips) - skips0)
		st.Graphs++
	}
	n := float64(st.Tokens)
	st.PolicyLoss /= n
	st.ApproxKL /= n
	st.ApproxKLK1 /= n
	st.RefKL /= n
	st.Entropy /= n
	st.LogpMean /= n
	st.ClipFrac = float64(nClip) / n
	st.DualClipFrac = float64(nDual) / n
	return st, nil
}
