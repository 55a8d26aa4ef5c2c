// Package lora reads, writes, initialises, validates and merges LoRA adapters
// in llama.cpp's adapter GGUF format, in pure Go (no cgo).
//
// # File format
//
// The format is the one llama.cpp's llama_adapter_lora_init loads
// (src/llama-adapter.cpp of the pinned module) and convert_lora_to_gguf.py
// writes:
//
//   - metadata general.type = "adapter", general.architecture = the base
//     model's architecture (llama.cpp refuses a mismatch), adapter.type =
//     "lora", adapter.lora.alpha (float32);
//   - for every adapted base tensor W (a 2-D weight such as
//     "blk.3.attn_q.weight" with ggml shape ne = [in, out]) two tensors,
//     "<W>.lora_a" with ne = [in, r] and "<W>.lora_b" with ne = [r, out].
//     In row-major terms A is r×in and B is out×r, the same orientation as
//     PEFT's lora_A.weight and lora_B.weight; llama.cpp computes
//     y = W·x + s·B·(A·x) by ggml_mul_mat(b, ggml_mul_mat(a, x));
//   - the scale is s = alpha/r with r = ne[0] of lora_b, times the user's
//     per-adapter scale; llama.cpp treats alpha = 0 as s = 1 (get_scale in
//     llama-adapter.h), and so does Adapter.Scale.
//
// llama.cpp checks: general.type, the architecture, adapter.type, that every
// tensor name ends in .lora_a or .lora_b (tensors ending in _norm.weight are
// skipped), that both halves of a pair exist, that the base tensor exists,
// and the shapes W.ne[0] = A.ne[0], W.ne[1] = B.ne[1], A.ne[1] = B.ne[0].
// Validate performs the same checks against a base GGUF plus finiteness of
// every value and agreement of the tensor types this package supports (F32
// and F16). Adapters on token_embd.weight (which llama.cpp stores flipped)
// are rejected as unsupported.
//
// # Targets and the parameter order
//
// targets.go defines, once for the whole module, the LoRA targets of a Qwen2
// block (Targets: q k v o gate up down → attn_q … ffn_down) and the one
// parameter order (Less: block number, then target, A before B). Adapter
// keeps its pairs in that order; Params and Tensors list its tensors in it,
// and so do cgo.Model.Params, the trainer's moments and Init's random draws.
// ParamInfo describes one tensor; FromParams and SameLayout convert and
// check, never reorder.
//
// # Initialisation
//
// Init follows PEFT's default LoRA initialisation: A is Kaiming-uniform with
// a = √5 (torch.nn.init.kaiming_uniform_, He et al. 2015), i.e. uniform in
// ±1/√in, and B is zero, so a fresh adapter leaves the model unchanged
// (Hu et al. 2021, "LoRA", §4.1). RandomB draws B uniform in ±1/√r instead,
// which is useful for tests that need the adapter to change the outputs.
//
// # Merging
//
// Merge writes a full model GGUF whose adapted weights are W + s·B·A and whose
// other tensors and metadata are copied unchanged, so llama.cpp gives the
// same outputs from the merged file as from base + adapter.
package lora
