package cgo

/*
#include <stdlib.h>
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// AdamWParams are the hyperparameters of one AdamW step on the backend
// (Loshchilov & Hutter 2019, Algorithm 2, with PyTorch's convention of
// scaling the decoupled decay by the learning rate; Kingma & Ba 2015 bias
// correction):
//
//	g ← c·g, c = MaxGradNorm/(‖g‖₂+1e-6) when c < 1 (torch clip_grad_norm_)
//	θ ← θ·(1 − LR·WeightDecay)
//	m ← β1·m + (1−β1)·g ;  v ← β2·v + (1−β2)·g²
//	θ ← θ − LR·(m/(1−β1^Step)) / (√(v/(1−β2^Step)) + Eps)
//
// computed in float32 by ggml's GGML_OP_OPT_STEP_ADAMW (CPU and CUDA).
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Step                               int64   // t ≥ 1: the number of this step
	MaxGradNorm                        float64 // ≤ 0: no clipping
}

func (p AdamWParams) c() C.struct_empo_adamw_params {
	return C.struct_empo_adamw_params{
		lr: C.double(p.LR), beta1: C.double(p.Beta1), beta2: C.double(p.Beta2), eps: C.double(p.Eps),
		weight_decay: C.double(p.WeightDecay), t: C.int64_t(p.Step), max_norm: C.double(p.MaxGradNorm),
	}
}

func (p AdamWParams) validate() error {
	ok := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case p.Step < 1:
		return fmt.Errorf("%w: AdamW step %d < 1", ErrConfig, p.Step)
	case !ok(p.LR) || p.LR < 0:
		return fmt.Errorf("%w: learning rate %v", ErrConfig, p.LR)
	case !(p.Beta1 >= 0 && p.Beta1 < 1) || !(p.Beta2 >= 0 && p.Beta2 < 1):
		return fmt.Errorf("%w: betas %v, %v", ErrConfig, p.Beta1, p.Beta2)
	case !(p.Eps > 0) || !ok(p.Eps) || !(p.WeightDecay >= 0) || !ok(p.WeightDecay) || math.IsNaN(p.MaxGradNorm):
		return fmt.Errorf("%w: eps %v, weight decay %v, max norm %v", ErrConfig, p.Eps, p.WeightDecay, p.MaxGradNorm)
	}
	return nil
}

// AdamWStep takes one AdamW step over the LoRA parameters with the
// accumulated gradients, on the backend that holds them (no copy to the
// host): the moments live beside the parameters. It returns the global
// gradient norm before clipping and whether clipping applied (the
// accumulators then hold the clipped gradient). A non-finite norm returns
// ErrNonFinite and changes nothing.
func (M *Model) AdamWStep(p AdamWParams) (gradNorm float64, clipped bool, err error) {
	if err := p.validate(); err != nil {
		return 0, false, err
	}
	m, err := M.lock()
	if err != nil {
		return 0, false, err
	}
	defer m.mu.Unlock()
	cp := p.c()
	var norm C.double
	var cl C.int
	if rc := C.empo_model_adamw_step(m.c, &cp, &norm, &cl); rc != C.EMPO_OK {
		return float64(norm), false, statusErr(rc, C.GoString(C.empo_model_last_error(m.c)))
	}
	return float64(norm), cl != 0, nil
}

// Moments returns copies of the AdamW moments m and v, in Params() order.
func (M *Model) Moments() (mom, vel [][]float32, err error) {
	m, err := M.lock()
	if err != nil {
		return nil, nil, err
	}
	defer m.mu.Unlock()
	mom, vel = make([][]float32, len(m.params)), make([][]float32, len(m.params))
	for i, p := range m.params {
		for w, dst := range [][][]float32{mom, vel} {
			v := make([]float32, p.Shape[0]*p.Shape[1])
			if rc := C.empo_model_moment_get(m.c, C.int(i), C.int(w), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v))); rc != C.EMPO_OK {
				return nil, nil, statusErr(rc, p.Name+": "+C.GoString(C.empo_model_last_error(m.c)))
			}
			dst[i] = v
		}
	}
	return mom, vel, nil
}

// SetMoments replaces the AdamW moments (Params() order and sizes; nil
// slices mean zero moments, i.e. a fresh optimizer).
func (M *Model) SetMoments(mom, vel [][]float32) error {
	m, err := M.lock()
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, src := range [][][]float32{mom, vel} {
		if src != nil && len(src) != len(m.params) {
			return fmt.Errorf("%w: %d moment tensors, want %d", ErrShape, len(src), len(m.params))
		}
		for i, p := range m.params {
			n := p.Shape[0] * p.Shape[1]
			if src != nil && len(src[i]) != n {
				return fmt.Errorf("%w: moments of %s have %d values, want %d", ErrShape, p.Name, len(src[i]), n)
			}
		}
	}
	for w, src := range [][][]float32{mom, vel} {
		for i, p := range m.params {
			v := make([]float32, p.Shape[0]*p.Shape[1])
			if src != nil {
				v = src[i]
			}
			if rc := C.empo_model_moment_set(m.c, C.int(i), C.int(w), (*C.float)(unsafe.Pointer(&v[0])), C.int64_t(len(v))); rc != C.EMPO_OK {
				return statusErr(rc, p.Name+": "+C.GoString(C.empo_model_last_error(m.c)))
			}
		}
	}
	return nil
}
