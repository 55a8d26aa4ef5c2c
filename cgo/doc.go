// Package cgo is empo2's training core: a ggml graph (through cgo, on the
// ggml compiled from the pinned github.com/ollama/ollama module) that runs a
// frozen Qwen2-family policy read from a GGUF file with trainable LoRA pairs,
// computes the per-token log-probs of the trained (action) tokens, evaluates
// the EMPO² objective — PPO clipped surrogate with decoupled ε_low/ε_high,
// dual clip for negative advantages, sequence-level low-probability masking,
// token-mean or seq-mean-token-mean aggregation, optional k3 KL to a
// reference and entropy bonus — and accumulates its exact gradients with
// respect to the LoRA parameters.
//
// Parameters and gradients cross into Go as [][]float32 in llama.cpp's
// adapter layout (<base>.lora_a ne=[n_in, r], <base>.lora_b ne=[r, n_out]),
// so an optimizer in Go can update them and an exporter can write them into
// a LoRA GGUF that llama.cpp loads unchanged.
//
// The C/C++ side (empo_train.h, empo_train.cpp) follows ggml's conventions
// (empo_<object>_<verb>, init/free, status codes) and catches every
// exception at the boundary. Every graph runs through ggml_backend_sched
// (device first, CPU fallback); a training step is one compute in which the
// scheduler's eval callback hands the forward outputs to Go (callback.go)
// for the objective's coefficients before the backward nodes run. The Go
// side validates shapes, token ids and
// finiteness first and reports typed errors (ErrShape, ErrNonFinite,
// ErrUnsupportedArch, ...). See docs/training.md for the design, shapes,
// verification and measured speed.
package cgo
