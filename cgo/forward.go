package cgo

/*
#include "empo_train.h"
extern int empoGoCoef(void *, int32_t, float *, float *, float *, float *);
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// The forward graphs: one packed batch through the C graph (with the
// coefficient callback for a training step), and the log-prob entry points.

// packed is a right-padded graph batch in the C layout.
type packed struct {
	B, T    int
	tokens  []int32 // [T*B], slot t + T*b
	pos     []int32
	rows    []int32 // [M]
	targets []int32 // [M]
}

func (m *model) maxTokens() int {
	if m.opts.MaxTokens > 0 {
		return m.opts.MaxTokens
	}
	return m.info.NCtxTrain * 8
}

// forward computes the log-probs and entropies of p's rows. With coef
// non-nil it is a training step: coef gets them mid-compute, fills the
// coefficients, and the backward adds the gradients into the accumulators
// (nothing is added when coef or the finiteness check fails).
func (m *model) forward(p *packed, coef coefFunc) (logp, ent []float32, err error) {
	M := len(p.rows)
	logp = make([]float32, M)
	ent = make([]float32, M)
	var pin runtime.Pinner
	defer pin.Unpin()
	b := p.cBatch(&pin)
	clp, cen := (*C.float)(unsafe.Pointer(&logp[0])), (*C.float)(unsafe.Pointer(&ent[0]))
	nonFinite := func(lp, en []float32) error {
		for j := range lp {
			if !finite32(lp[j]) || !finite32(en[j]) {
				return fmt.Errorf("%w: the forward pass produced log-prob %v / entropy %v", ErrNonFinite, lp[j], en[j])
			}
		}
		return nil
	}
	var rc C.int
	var call *coefCall
	if coef == nil {
		rc = C.empo_model_forward(m.c, &b, clp, cen)
	} else {
		call = &coefCall{fn: func(lp, en, cl, ce []float32) error {
			if err := nonFinite(lp, en); err != nil {
				return err
			}
			return coef(lp, en, cl, ce)
		}}
		h := cgo.NewHandle(call)
		defer h.Delete()
		pin.Pin(&h)
		rc = C.empo_model_train(m.c, &b, C.empo_coef_fn(C.empoGoCoef), unsafe.Pointer(&h), clp, cen)
	}
	runtime.KeepAlive(p)
	m.last = p.B * p.T
	if call != nil && call.err != nil {
		return nil, nil, call.err
	}
	if rc != C.EMPO_OK {
		return nil, nil, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	if err := nonFinite(logp, ent); err != nil {
		return nil, nil, err
	}
	return logp, ent, nil
}

// LogProbs returns out[t] = log π(tokens[t] | tokens[:t]) for t ≥ 1 and
// out[0] = 0 (forward only; gradients untouched).
func (M *Model) LogProbs(tokens []int32) ([]float32, error) {
	out, err := M.LogProbsBatch([][]int32{tokens})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// LogProbsBatch is LogProbs for several sequences: LogProbsAt with every
// position t ≥ 1 wanted.
func (M *Model) LogProbsBatch(seqs [][]int32) ([][]float32, error) {
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("%w: sequence %d has %d tokens (need ≥ 2)", ErrShape, i, len(s))
		}
	}
	return M.LogProbsAt(seqs, nil)
}

// LogProbsAt returns out[i][t] = log π(seqs[i][t] | seqs[i][:t]) at every
// position t where want[i][t] is set, 0 elsewhere (forward only; gradients
// untouched). want[i] has len(seqs[i]) entries with want[i][0] false (the
// first token has no prediction); want == nil or want[i] == nil means every
// t ≥ 1. Only the wanted rows are projected to the vocabulary, so a long
// prompt whose response alone is wanted (π_old of a behaviour sequence)
// costs its tokens through the blocks and its response rows × V in the
// head. The work is batched into as few graphs as the caps allow (see
// Options.MaxComputeBytes); the values do not depend on how it is split
// beyond float rounding.
func (M *Model) LogProbsAt(seqs [][]int32, want [][]bool) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if len(seqs) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrShape)
	}
	if want != nil && len(want) != len(seqs) {
		return nil, fmt.Errorf("%w: %d want masks for %d sequences", ErrShape, len(want), len(seqs))
	}
	rows := make([][]int, len(seqs))
	for i, s := range seqs {
		var w []bool
		if want != nil {
			w = want[i]
		}
		if w != nil {
			if len(w) != len(s) {
				return nil, fmt.Errorf("%w: sequence %d: want mask of %d for %d tokens", ErrShape, i, len(w), len(s))
			}
			if len(w) > 0 && w[0] {
				return nil, fmt.Errorf("%w: sequence %d: want[0] is set but the first token has no prediction", ErrShape, i)
			}
		}
		for t := 1; t < len(s); t++ {
			if w == nil || w[t] {
				rows[i] = append(rows[i], t)
			}
		}
	}
	parts, err := m.plan(seqs, rows, false)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float32, len(s))
	}
	err = m.forwardParts(seqs, rows, parts, func(seq, t int, lp float32) { out[seq][t] = lp })
	return out, err
}

// forwardParts computes the forward graphs of a plan and hands every
// log-prob to put (sequence index, position, value).
func (m *model) forwardParts(seqs [][]int32, rows [][]int, parts [][]span, put func(seq, t int, lp float32)) error {
	for _, part := range parts {
		p, err := m.packSpans(seqs, rows, part)
		if err != nil {
			return err
		}
		logp, _, err := m.forward(p, nil)
		if err != nil {
			return err
		}
		j := 0
		for _, sp := range part {
			for _, t := range rows[sp.seq][sp.lo:sp.hi] {
				put(sp.seq, t, logp[j])
				j++
			}
		}
	}
	return nil
}
