// Package cgo is empo2's training core: a ggml graph (through cgo, on the
// ggml compiled from the pinned github.com/ollama/ollama module) that runs a
// frozen Qwen2-family policy — read from a GGUF file (Load) or, so that the
// frozen weights exist once per process, built on the tensors of a model
// llama.cpp already loaded for the rollouts (LoadShared) — with trainable
// LoRA pairs,
// computes the per-token log-probs of the trained (action) tokens, evaluates
// the objective — the per-token policy loss its caller gives
// (Objective.Policy: EMPO²'s clipped / dual-clip surrogate, package algo,
// which also validates it and decides masking), token-mean or
// seq-mean-token-mean aggregation, optional k3 KL to a reference and
// entropy bonus — and accumulates its exact gradients with respect to the
// LoRA parameters.
//
// Parameters are described by lora.ParamInfo (ParamInfo is that type) in
// the one canonical order of the module (lora.Less: block, then q, k, v, o,
// gate, up, down, A before B), reported by the C side with their layer and
// target; they cross into Go as [][]float32 in that order or as a
// lora.Adapter (ReadAdapter/WriteAdapter), in llama.cpp's adapter layout
// (<base>.lora_a ne=[n_in, r], <base>.lora_b ne=[r, n_out]). The optimizer
// runs where the parameters live: AdamWStep clips the global gradient norm
// and applies ggml's GGML_OP_OPT_STEP_ADAMW on the training backend, with the
// moments resident beside the parameters (Moments/SetMoments for
// checkpoints); Optimizer is the same code on standalone tensors. ProfileStep
// times a step per kind of ggml node.
//
// Only the rows whose log-probs are used are projected to the vocabulary:
// the trained tokens in ForwardBackward and TrainedLogProbs, the wanted
// positions in LogProbsAt (LogProbsBatch: all). Every graph's compute
// buffer is measured by ggml's allocator before it is allocated and kept
// under Options.MaxComputeBytes by splitting the call over several graphs
// (ErrComputeCap when one row cannot fit); large compute buffers are freed
// after each call. Frozen matrices may be F32, F16, BF16 or any quantized
// type with a CPU dot product (Q8_0, Q4_0, Q4_K_M, ...; ErrTensorType
// otherwise), from one GGUF file or a split one (given its first file).
//
// LoadFull is the other mode (`empo2 sft --full`): every weight of an F32
// model is a trainable parameter in the optimizer's buffer (4× the model in
// F32 with gradients and moments), no LoRA, parameters in the GGUF file's
// tensor order; SaveFull writes the trained weights as a new base GGUF.
//
// The C/C++ side (empo_train.h, the one C API; empo_*.cpp cut by role,
// see empo_train_internal.h) follows ggml's conventions
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
