package cgo

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// coefFunc receives the forward outputs of a training step (M floats each,
// valid during the call only) and fills the coefficients cLogp, cEnt (M
// floats, zeroed). A non-nil error aborts the step.
type coefFunc func(logp, ent, cLogp, cEnt []float32) error

// coefCall is what the C side's user pointer refers to during empo_model_train.
type coefCall struct {
	fn  coefFunc
	err error // the error fn returned (or a recovered panic)
}

// empoGoCoef is the empo_coef_fn given to empo_model_train. It is called by
// C (ggml_backend_sched's eval callback) on the goroutine that called
// empo_model_train, with m.mu held. user points to a cgo.Handle of a
// *coefCall. A panic is recovered here: it must not unwind through C frames.
//
//export empoGoCoef
func empoGoCoef(user unsafe.Pointer, M C.int32_t, logp, ent, cLogp, cEnt *C.float) (rc C.int) {
	call, ok := (*(*cgo.Handle)(user)).Value().(*coefCall)
	if !ok {
		return 1
	}
	defer func() {
		if r := recover(); r != nil {
			call.err = fmt.Errorf("%w: panic in the objective: %v", ErrBackend, r)
			rc = 1
		}
	}()
	n := int(M)
	if n <= 0 {
		call.err = fmt.Errorf("%w: coefficient callback with M = %d", ErrBackend, n)
		return 1
	}
	f := func(p *C.float) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(p)), n) }
	if err := call.fn(f(logp), f(ent), f(cLogp), f(cEnt)); err != nil {
		call.err = err
		return 1
	}
	return 0
}
