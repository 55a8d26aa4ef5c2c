package llama

import (
	"unsafe"
)

// Share hands the loaded llama_model to other code of this module that
// builds ggml graphs directly on its weight tensors (package cgo: the
// training graph reads the same frozen weights as the rollouts, so they
// exist once per process). It takes a reference: the model stays loaded,
// even after Close, until release is called (once). The pointer is a
// *C.struct_llama_model of the pinned llama.cpp; the borrower must only read
// the weights.
func (m *Model) Share() (ptr unsafe.Pointer, release func(), err error) {
	if err := m.acquire(); err != nil {
		return nil, nil, err
	}
	done := false
	return unsafe.Pointer(m.c), func() {
		if !done {
			done = true
			m.release()
		}
	}, nil
}

// CheckGGUF runs the checks LoadModel does on a GGUF file before llama.cpp
// or ggml reads it (structure, empty tensor dimensions that crash ggml's
// reader with SIGFPE, tokenizer arrays): the one guard every C loader of
// this module calls first. Errors wrap ErrModelLoad.
func CheckGGUF(path string) error {
	_, _, err := validateGGUF(path, false)
	return err
}
