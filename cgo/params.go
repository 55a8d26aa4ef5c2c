package cgo

/*
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	loraPkg "github.com/empo2/empo2/lora"
)

// Parameter I/O: the trainable tensors read and written as []float32, the
// gradient accumulators, memory figures.

// Params describes the trainable tensors in the order of every [][]float32.
func (M *Model) Params() []ParamInfo {
	if M == nil || M.m == nil {
		return nil
	}
	return append([]ParamInfo(nil), M.m.params...)
}

// lessParam is the canonical order of parameter tensors (lora.Less on the
// base names, A before B): the C side must produce it.
func lessParam(a, b ParamInfo) bool {
	if a.Base == b.Base {
		return !a.IsB && b.IsB
	}
	return loraPkg.Less(a.Base, b.Base)
}

func (M *Model) readAll(grad bool) ([][]float32, error) {
	m, err := M.lock()
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([][]float32, len(m.params))
	for i, p := range m.params {
		v := make([]float32, p.Shape[0]*p.Shape[1])
		var rc C.int
		if grad {
			rc = C.empo_model_grad_get(m.c, C.int(i), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v)))
		} else {
			rc = C.empo_model_param_get(m.c, C.int(i), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v)))
		}
		if rc != C.EMPO_OK {
			return nil, statusErr(rc, p.Name+": "+C.GoString(C.empo_model_last_error(m.c)))
		}
		out[i] = v
	}
	return out, nil
}

// ReadParams returns copies of the trainable parameters, in Params() order
// (ErrClosed after Close; a backend failure is returned, never swallowed).
func (M *Model) ReadParams() ([][]float32, error) { return M.readAll(false) }

// Grads returns copies of the accumulated gradients, in Params() order.
func (M *Model) Grads() ([][]float32, error) { return M.readAll(true) }

// ReadAdapter returns the LoRA parameters as a llama.cpp adapter (a copy;
// its Params() equal M.Params()).
func (M *Model) ReadAdapter() (*loraPkg.Adapter, error) {
	if M.Full() {
		return nil, fmt.Errorf("%w: a full-training model has no LoRA adapter (SaveFull writes its weights)", ErrConfig)
	}
	vals, err := M.ReadParams()
	if err != nil {
		return nil, err
	}
	return loraPkg.FromParams(M.Info().Arch, M.LoRA().Alpha, M.Params(), vals)
}

// WriteAdapter replaces the LoRA parameters with a's, which must have
// exactly the model's tensors (same targets, rank and base shapes) and its
// alpha.
func (M *Model) WriteAdapter(a *loraPkg.Adapter) error {
	if a == nil {
		return fmt.Errorf("%w: nil adapter", ErrConfig)
	}
	if M.Full() {
		return fmt.Errorf("%w: a full-training model has no LoRA adapter", ErrConfig)
	}
	if alpha := M.LoRA().Alpha; a.Alpha != alpha {
		return fmt.Errorf("%w: adapter alpha %v, model %v", ErrConfig, a.Alpha, alpha)
	}
	if err := loraPkg.SameLayout(a.Params(), M.Params()); err != nil {
		return fmt.Errorf("%w: %w", ErrShape, err)
	}
	return M.WriteParams(a.Tensors())
}

// WriteParams replaces the trainable parameters (LoRA, or every weight of
// a LoadFull model); vals must match Params() in count and sizes and be
// finite.
func (M *Model) WriteParams(vals [][]float32) error {
	m, err := M.lock()
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if len(vals) != len(m.params) {
		return fmt.Errorf("%w: %d param tensors, want %d", ErrShape, len(vals), len(m.params))
	}
	for i, p := range m.params {
		if len(vals[i]) != p.Shape[0]*p.Shape[1] {
			return fmt.Errorf("%w: %s has %d values, want %d", ErrShape, p.Name, len(vals[i]), p.Shape[0]*p.Shape[1])
		}
		for _, x := range vals[i] {
			if !finite32(x) {
				return fmt.Errorf("%w: %s contains %v", ErrNonFinite, p.Name, x)
			}
		}
	}
	for i := range m.params {
		if rc := C.empo_model_param_set(m.c, C.int(i), (*C.float)(unsafe.Pointer(&vals[i][0])), C.int64_t(len(vals[i]))); rc != C.EMPO_OK {
			return statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
		}
	}
	return nil
}

// call runs one status-returning C function on the model under its lock.
func (M *Model) call(fn func(*C.struct_empo_model) C.int) error {
	m, err := M.lock()
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	if rc := fn(m.c); rc != C.EMPO_OK {
		return statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	return nil
}

// ZeroGrads clears the gradient accumulators.
func (M *Model) ZeroGrads() error {
	return M.call(func(c *C.struct_empo_model) C.int { return C.empo_model_grad_zero(c) })
}

// MemoryBytes reports ggml buffer sizes.
func (M *Model) MemoryBytes() MemoryStats {
	m, err := M.lock()
	if err != nil {
		return MemoryStats{}
	}
	defer m.mu.Unlock()
	var cm C.struct_empo_model_mem
	C.empo_model_get_mem(m.c, &cm)
	return MemoryStats{
		Weights: int64(cm.weights), Transposed: int64(cm.transposed), Params: int64(cm.params),
		Compute: int64(cm.compute_peak), ComputeLast: int64(cm.compute_last), ComputeAlloc: int64(cm.compute_alloc),
		ComputeCap: int64(cm.compute_cap), Frozen: int64(cm.frozen), PaddedTokens: m.last,
		Rewritten: int(cm.n_rewritten), RewrittenLoRA: int(cm.n_rewritten_op), Pinned: int(cm.n_pinned), Splits: int(cm.n_splits),
		AttnChunks: int(cm.attn_chunks), AttnRecomputed: int(cm.attn_recomputed),
		LossScaling: cm.loss_scale_on != 0, LossScaleLog2: int(cm.loss_scale_log2), LossScaleSkips: int64(cm.loss_scale_skips),
	}
}

// ResetComputePeak sets MemoryStats.Compute to 0, so that the next reading
// is the peak of the calls in between (e.g. one update).
func (M *Model) ResetComputePeak() error {
	return M.call(func(c *C.struct_empo_model) C.int { return C.empo_model_mem_reset_peak(c) })
}
