package cgo

/*
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"sort"
)

// OpTime is the time of one kind of node in a profiled step.
type OpTime struct {
	// Key: "fwd " or "bwd " (forward nodes, or backward and surrogate
	// nodes), the ggml op, and for MUL_MAT/OUT_PROD the type of the first
	// operand with " Wᵀ" for the frozen transposed copies (dX through frozen
	// linears) or " LoRA" for LoRA tensors; e.g. "bwd MUL_MAT[f16 Wᵀ]".
	Key     string
	Seconds float64
	Count   int // nodes
}

// ProfileStep runs one training step (ForwardBackward, gradients added as
// usual) with every node computed on its own through the scheduler's eval
// callback, and returns the time per kind of node, largest first. The
// per-node computes add thread start/stop overhead, so the total is above
// a normal step's time; the shares show where the time goes.
func (M *Model) ProfileStep(batch []Sequence, obj Objective, lossScale float32) ([]OpTime, Stats, error) {
	m, err := M.lock()
	if err != nil {
		return nil, Stats{}, err
	}
	defer m.mu.Unlock()
	var st Stats
	ops, err := m.profiled(func() error {
		var err error
		st, err = m.objective(batch, obj, lossScale, true)
		return err
	})
	return ops, st, err
}

// ProfileForward is ProfileStep for the forward graph of LogProbsBatch(seqs)
// (every node is "fwd ...").
func (M *Model) ProfileForward(seqs [][]int32) ([]OpTime, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	rows := make([][]int, len(seqs))
	for i, s := range seqs {
		for t := 1; t < len(s); t++ {
			rows[i] = append(rows[i], t)
		}
	}
	return m.profiled(func() error {
		parts, err := m.plan(seqs, rows, false)
		if err != nil {
			return err
		}
		return m.forwardParts(seqs, rows, parts, func(int, int, float32) {})
	})
}

// profiled runs fn with the per-node profile on and returns its entries.
func (m *model) profiled(fn func() error) ([]OpTime, error) {
	if rc := C.empo_model_profile(m.c, 1); rc != C.EMPO_OK {
		return nil, statusErr(rc, "profile")
	}
	defer C.empo_model_profile(m.c, 0)
	if err := fn(); err != nil {
		return nil, err
	}
	n := int(C.empo_model_profile_n(m.c))
	out := make([]OpTime, 0, n)
	var key [256]C.char
	for i := 0; i < n; i++ {
		var us, cnt C.int64_t
		if rc := C.empo_model_profile_get(m.c, C.int(i), &key[0], C.size_t(len(key)), &us, &cnt); rc != C.EMPO_OK {
			return nil, statusErr(rc, fmt.Sprintf("profile entry %d", i))
		}
		out = append(out, OpTime{Key: C.GoString(&key[0]), Seconds: float64(us) / 1e6, Count: int(cnt)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seconds > out[j].Seconds })
	return out, nil
}
