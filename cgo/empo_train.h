// empo_train.h — C interface of empo2's ggml training graph (Qwen2 + LoRA).
//
// Style follows ggml-opt.h: an opaque object, init/free pairs, a params
// struct with a *_default_params() function, int status codes. Every
// function catches C++ exceptions and returns a status; callers (the Go
// package) validate shapes, token ids and finiteness before calling, so no
// GGML_ASSERT is reachable from user input.
//
// Shape notation: ggml ne order, [ne0, ne1] with ne0 contiguous.
//   B sequences, T padded length, N = B*T token slots, M trained positions,
//   C hidden, V vocabulary, r LoRA rank.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// status codes
enum empo_status {
    EMPO_OK           = 0,
    EMPO_ERR_IO       = 1, // model file cannot be opened/read
    EMPO_ERR_ARCH     = 2, // not a qwen2 GGUF, or unexpected tensor layout
    EMPO_ERR_SHAPE    = 3, // bad index, size or batch shape
    EMPO_ERR_CONFIG   = 4, // bad params
    EMPO_ERR_BACKEND  = 5, // backend init / allocation / compute failed
    EMPO_ERR_STATE    = 6, // empo_model_grad_restore without a snapshot
    EMPO_ERR_INTERNAL = 7, // caught exception
    EMPO_ERR_ABORTED  = 8, // the coefficient callback of empo_model_train returned nonzero
    EMPO_ERR_NONFINITE = 9, // a gradient (its global norm) is NaN or infinite: no step taken
    EMPO_ERR_TOO_LARGE = 10, // the graph's compute buffer would exceed empo_model_params.max_compute: nothing computed
    EMPO_ERR_TYPE     = 11, // a tensor's type cannot be trained on (the message names the tensor and the type)
};

// LoRA target indices (bit i of empo_model_params.lora_targets). The order is
// that of lora.Targets in Go (q k v o gate up down); the tensor names come
// from the caller (empo_model_params.target_tensor), C defines none.
enum empo_target {
    EMPO_TARGET_Q = 0, EMPO_TARGET_K, EMPO_TARGET_V, EMPO_TARGET_O,
    EMPO_TARGET_GATE, EMPO_TARGET_UP, EMPO_TARGET_DOWN,
    EMPO_TARGET_COUNT,
};

struct empo_model_params {
    int      n_threads;       // CPU threads (>= 1)
    int      device;          // 0 = CPU, 1 = GPU (error if none), 2 = GPU if available else CPU
    bool     autograd_frozen; // true: dX through frozen linears by autograd OUT_PROD (weights made F32)
    bool     transpose_in_graph; // true: no stored Wᵀ copies; each training graph transposes W before use
    // true: full training. Every tensor of the model (token_embd, output_norm,
    // output, and per block the norms, q/k/v biases and the seven matrices)
    // is a trainable F32 parameter in the optimizer's flat buffer; there is no
    // LoRA (lora_targets must be 0, lora_rank/alpha are ignored). The GGUF
    // must hold only F32 tensors (else EMPO_ERR_CONFIG naming the first
    // other type) and only tensors of the graph (else EMPO_ERR_ARCH).
    // Backward by autograd; dX through every matrix is MUL_MAT(cont(Wᵀ), dY)
    // with Wᵀ made inside the graph from the current W (no stored copies,
    // which would go stale), or autograd's OUT_PROD with autograd_frozen.
    // Not with empo_model_init_shared.
    bool     full;
    int      lora_rank;       // r >= 1
    float    lora_alpha;      // scale = alpha/r (alpha == 0: scale 1, llama.cpp convention)
    uint32_t lora_targets;    // bit mask of enum empo_target
    // llama.cpp tensor name of each target ("attn_q", ...): the base tensor of
    // target k in block i is "blk.<i>.<target_tensor[k]>.weight". Required;
    // the strings are copied by empo_model_init.
    const char * target_tensor[EMPO_TARGET_COUNT];
    // Cap on the compute buffer of one graph (bytes), checked before anything
    // is allocated with ggml's allocator on the graph itself (no estimate):
    // a larger graph is refused with EMPO_ERR_TOO_LARGE (the caller splits
    // the batch). 0: the default, the larger of EMPO_COMPUTE_FLOOR +
    // empo_model_mem.frozen (activations within the model's own size plus a
    // floor) and the training graph of one sequence of
    // min(n_ctx, EMPO_COMPUTE_REF_TOKENS) tokens (so that such a sequence
    // always trains: its L·H·T² attention matrices, not the weights,
    // dominate at long contexts); < 0: no cap. The value in force is
    // empo_model_mem.compute_cap.
    int64_t  max_compute;
    // The sequence length whose training graph the default cap
    // (max_compute 0) fits: 0 = min(n_ctx, EMPO_COMPUTE_REF_TOKENS); a
    // caller whose sequences are longer (up to n_ctx) says so here.
    int32_t  compute_ref_tokens;
    // > 0 with max_compute = 0: the default cap is at most this many bytes
    // (the memory the caller has left for compute); ≤ 0: not used.
    int64_t  compute_budget;
    // Compute buffers larger than this (bytes) are freed at the end of every
    // call, so that a long batch does not keep its memory resident until the
    // next one; smaller ones are kept for reuse. < 0: never freed.
    int64_t  keep_compute;
    // Attention memory bound (bytes). The score block softmax(Kᵀ·Q) of a
    // layer is [T, T, H·B] floats; when it exceeds this, each layer computes
    // its attention in query chunks of Tq rows whose block [T, Tq, H·B] fits
    // (the outputs assembled with ACC). When the blocks of all layers
    // together exceed it, a training graph does not keep the forward's
    // softmax for the backward: each chunk's softmax is recomputed from Q
    // and K in the backward, right after its output's gradient (gradient
    // checkpointing of the attention probabilities). Both leave every value
    // as it was (the same dot products and row softmaxes); they cap the
    // attention's share of the compute buffer at a few blocks instead of
    // L·T²·H·B floats. 0: EMPO_ATTN_BLOCK; < 0: neither (one block per layer,
    // every layer's softmax kept).
    int64_t  attn_block;
    // Loss scaling of the backward (empo_step.cpp): the backward of a
    // training call runs on S·L' with S a power of two that brings the
    // largest |coefficient| to 2^EMPO_LOSS_SCALE_LOG2, and every gradient
    // contribution is multiplied by 1/S in F32 before it is added to its
    // accumulator, so that dY does not underflow where the backward rounds
    // it to F16 (dX = Wᵀ·dY with an F16 Wᵀ: F16, BF16 and quantized bases).
    // On overflow (a non-finite gradient) the call is recomputed at a scale
    // 2^EMPO_LOSS_SCALE_BACKOFF lower (empo_model_mem.loss_scale_skips).
    // 0: on where a frozen matrix is not F32 (LoRA only); 1: on (LoRA
    // only); -1: off.
    int32_t  loss_scaling;
};

// the default compute cap's floor and reference length, the default keep_compute
#define EMPO_COMPUTE_FLOOR      ((int64_t) 256 << 20)
#define EMPO_COMPUTE_REF_TOKENS 2048
#define EMPO_COMPUTE_KEEP       ((int64_t) 64 << 20)
#define EMPO_ATTN_BLOCK         ((int64_t) 32 << 20)

// defaults: 1 thread, CPU, transposed-copy backward, r = 8, alpha = 16, all
// targets, the default compute cap, EMPO_COMPUTE_KEEP, EMPO_ATTN_BLOCK.
// Returned by value; nothing to free.
struct empo_model_params empo_model_default_params(void);

// hyperparameters read from the GGUF
struct empo_model_info {
    int   n_layer, n_embd, n_head, n_head_kv, n_embd_head, n_ff, n_vocab, n_ctx;
    float rope_base, norm_eps;
    int   tied;              // 1: logits use token_embd.weight
    int   full;              // 1: full training (every tensor is a parameter, no LoRA)
    int   wtype;             // ggml_type of the stored frozen matrices (the last non-F32 one read)
    char  wtype_name[16];    // the base's type as llama.cpp names its file type: general.file_type
                             // ("f32", "f16", "q8_0", "q4_K_M", ...), else its most frequent matrix type
    char  backend[64];       // ggml backend name
};

// buffer sizes (bytes)
struct empo_model_mem {
    int64_t weights;         // frozen weights incl. transposed copies
    int64_t transposed;      // of which transposed copies
    int64_t params;          // params + gradient accumulators + AdamW moments (full: 4x the F32 model)
    int64_t compute_peak;    // largest compute buffer a graph needed since init or empo_model_mem_reset_peak
    int64_t compute_last;    // compute buffer the last graph needed (measured by ggml's allocator)
    int64_t compute_alloc;   // compute buffer allocated now (0 after a call that freed it, see keep_compute)
    int64_t compute_cap;     // max_compute in force (bytes; < 0: none)
    int64_t frozen;          // bytes of the model's tensors the graph reads (shared or own, full: the trainable weights; no Wᵀ, no LoRA)
    int32_t n_rewritten;     // OUT_PROD(W, dYᵀ) nodes turned into MUL_MAT(Wᵀ, dY) in the last training graph
    int32_t n_pinned;        // RMS_NORM_BACK / SOFT_MAX_BACK operands pinned against in-place aliasing
    int32_t n_splits;        // ggml_backend_sched splits of the last graph (1: one backend ran all of it)
    int32_t n_rewritten_op;  // other 2-D OUT_PROD nodes (LoRA gradients, dX through LoRA) computed as MUL_MAT
    int32_t attn_chunks;     // query chunks per layer of the last graph (1: unchunked; see attn_block)
    int32_t attn_recomputed; // attention softmaxes recomputed in the last training graph's backward
    int32_t loss_scale_on;   // 1: the backward is loss-scaled (empo_model_params.loss_scaling resolved)
    int32_t loss_scale_log2; // log2 of the scale S of the last training graph (0 when off)
    int64_t loss_scale_skips; // training graphs recomputed at a lower scale after an overflow, since init
};

struct empo_model;

// Load a qwen2 GGUF (frozen, on the chosen backend) and create zero LoRA
// params/grads. On failure *out is NULL and err (if non-NULL) holds a message.
// lifetime: free with empo_model_free.
int  empo_model_init(const char * path, struct empo_model_params params,
                     struct empo_model ** out, char * err, size_t err_len);
void empo_model_free(struct empo_model * m); // NULL-safe

// Build the training graph on a loaded llama.cpp model's own weight tensors
// (frozen weights once per process; read-only use, the model must outlive
// the empo_model): only the transposed copies (none with transpose_in_graph),
// LoRA params, gradients and moments are allocated.
// The primary backend is the device holding the weights (CPU when they are
// in host memory); params.device is ignored. autograd_frozen is refused.
struct llama_model;
int  empo_model_init_shared(const struct llama_model * model, struct empo_model_params params,
                            struct empo_model ** out, char * err, size_t err_len);

// The bytes of the transposed copies Wᵀ that empo_model_init_shared would
// store for this model with transpose_in_graph = false (the head — token_embd
// when tied — and the seven matrices of every block, each in the type of its
// Wᵀ: its own, F16 for quantized types), computed from the tensors' shapes
// and types without allocating anything, so that a caller can choose
// transpose_in_graph before loading. *out = 0 on failure.
int  empo_model_shared_transposed_bytes(const struct llama_model * model, int64_t * out, char * err, size_t err_len);

// message of the last failed call on m; owned by m, valid until the next call on m
// (a static string for m == NULL)
const char * empo_model_last_error(const struct empo_model * m);

// copy the hyperparameters / buffer sizes into caller-owned structs
int  empo_model_get_info(const struct empo_model * m, struct empo_model_info * info);
int  empo_model_get_mem (const struct empo_model * m, struct empo_model_mem  * mem);
// compute_peak := 0 (e.g. to read the peak of one update)
int  empo_model_mem_reset_peak(struct empo_model * m);

// number of trainable tensors (0 for NULL), in a fixed order. LoRA: per
// layer, per enabled target (q k v o gate up down), lora_a [n_in, r] then
// lora_b [r, n_out] (the canonical order of lora.Less in Go). Full training:
// every tensor of the GGUF file, in the file's tensor order.
int  empo_model_n_params(const struct empo_model * m);

// metadata of trainable tensor i, as the C side built it
struct empo_param_info {
    char    name[256];  // "<base>.lora_a|b" (full: the GGUF tensor name), NUL-terminated
    int64_t ne[2];      // ggml shape: lora_a [n_in, r], lora_b [r, n_out]; full: the tensor's [ne0, ne1] (ne1 = 1 for vectors)
    int32_t layer;      // block index (full: -1 for tensors outside the blocks)
    int32_t target;     // enum empo_target (full: -1, no LoRA target)
    int32_t is_b;       // 1: lora_b, 0: lora_a (full: 0)
};
int  empo_model_param_info(const struct empo_model * m, int i, struct empo_param_info * info);
// copy tensor i (or its gradient accumulator) to/from a caller-owned buffer of
// n floats; n must equal ne[0]*ne[1]; data in ggml layout (F32, ne0 contiguous)
int  empo_model_param_get(struct empo_model * m, int i, float * dst, int64_t n);
int  empo_model_param_set(struct empo_model * m, int i, const float * src, int64_t n);
int  empo_model_grad_get (struct empo_model * m, int i, float * dst, int64_t n);
// set every gradient accumulator to 0 (they add across backward calls until then)
int  empo_model_grad_zero(struct empo_model * m);
// copy every gradient accumulator into a host snapshot kept by m (replacing
// the previous one) / write the snapshot back (EMPO_ERR_STATE without one).
// For a caller that splits one logical step into several empo_model_train
// calls and must undo them all when a later one fails.
int  empo_model_grad_save(struct empo_model * m);
int  empo_model_grad_restore(struct empo_model * m);

// Per-op profile: with on != 0 the following graphs are computed one node at
// a time through the scheduler's eval callback and the time of every node is
// added to an entry keyed "fwd|bwd <op>[<src0 type> Wᵀ|LoRA]" (cleared by
// each call). Slower than a normal step (one graph compute per node).
int empo_model_profile(struct empo_model * m, int on);
int empo_model_profile_n(const struct empo_model * m);
int empo_model_profile_get(const struct empo_model * m, int i, char * key, size_t key_len, int64_t * us, int64_t * count);

// ---------------------------------------------------------------- node capture (diagnosis)
//
// With on != 0 the following graphs (empo_model_forward, empo_model_train)
// are computed one node at a time through the scheduler's eval callback, and
// after each node its output is copied to host memory: contiguous F32 and
// F16 outputs (F16 converted to F32), none for views (VIEW, RESHAPE,
// PERMUTE, TRANSPOSE) and other types, until max_bytes of values are held
// (later nodes are listed without values). Each call replaces the previous
// capture. One compute per node: slower than a normal call and, on a GPU,
// without the fusion of consecutive ops or graph capture (both work within
// one compute), so that a result that differs only in a normal call points
// at those. Two engines built with the same options compute the same nodes
// in the same order (the graph depends only on the model's shapes, the
// options and the batch), so captures can be compared node by node.
struct empo_node_info {
    int32_t index;        // position in the computed graph
    int32_t backward;     // 1: after the last forward node (surrogate loss, backward, gradient accumulation)
    int32_t type;         // ggml_type of the output
    int32_t n_src;        // sources (src[] holds the first EMPO_NODE_SRCS)
    int64_t ne[4];        // output shape
    int64_t n;            // values captured (0: none)
    char    name[64];     // ggml name ("" when unnamed)
    char    op[32];       // ggml_op_desc
    char    backend[32];  // backend that computed it
    char    src[4][64];   // source names as the scheduler left them (a copy from another backend is "BACKEND#name#0")
};
#define EMPO_NODE_SRCS 4

// on: 0 off, 1 capture; max_bytes <= 0: EMPO_CAPTURE_DEFAULT_BYTES
int empo_model_capture(struct empo_model * m, int on, int64_t max_bytes);
int empo_model_capture_n(const struct empo_model * m); // nodes of the last captured graph
int empo_model_capture_info(const struct empo_model * m, int i, struct empo_node_info * info);
// copy node i's values (n must equal its info.n) into dst
int empo_model_capture_get(const struct empo_model * m, int i, float * dst, int64_t n);
#define EMPO_CAPTURE_DEFAULT_BYTES ((int64_t) 1 << 30)

// ---------------------------------------------------------------- AdamW on the backend
//
// The optimizer runs where the parameters live: first and second moments are
// F32 tensors in the primary device's buffer beside the parameters, and one
// step is one graph on that backend: global gradient norm (Σ_i sum(g_i²),
// added in double on the host), optional clipping (g ← c·g in place,
// c = max_norm/(‖g‖+1e-6) when < 1, as torch.nn.utils.clip_grad_norm_), then
// GGML_OP_OPT_STEP_ADAMW on every tensor:
//   θ ← θ·(1 − lr·λ);  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
//   θ ← θ − lr·(m/(1−β1^t)) / (√(v/(1−β2^t)) + ε)
// (Loshchilov & Hutter 2019, Algorithm 2, PyTorch's decay convention; Kingma &
// Ba 2015 bias correction), in float32 on the backend.
struct empo_adamw_params {
    double  lr, beta1, beta2, eps, weight_decay;
    int64_t t;          // step number, >= 1 (bias correction uses β^t)
    double  max_norm;   // global-norm clip; <= 0: no clipping
};

// One AdamW step over the model's LoRA params with its gradient accumulators
// (clipped in place when clipping applies). grad_norm: the norm before
// clipping; clipped: 1 when clipping applied. A non-finite norm returns
// EMPO_ERR_NONFINITE before anything changes.
int empo_model_adamw_step(struct empo_model * m, const struct empo_adamw_params * p, double * grad_norm, int * clipped);
// copy the moments of parameter i (which: 0 = m, 1 = v) to/from caller memory (n floats)
int empo_model_moment_get(struct empo_model * m, int i, int which, float * dst, int64_t n);
int empo_model_moment_set(struct empo_model * m, int i, int which, const float * src, int64_t n);

// A micro-batch: B sequences right-padded to T (token slot t + T*b).
// All arrays are caller-owned and only read during empo_model_forward/train.
struct empo_batch {
    int32_t         B, T;
    const int32_t * tokens;  // [N] token ids, all in [0, V)
    const int32_t * pos;     // [N] positions (t for slot t + T*b)
    int32_t         M;       // trained positions, >= 1
    const int32_t * rows;    // [M] slot whose hidden state predicts the token: (t-1) + T*b
    const int32_t * targets; // [M] the predicted token id tokens[t + T*b]
};

// Execution: every graph runs through ggml_backend_sched over [device, CPU]
// (just [CPU] when the device is the CPU); weights, LoRA params and gradient
// accumulators live in buffers of the device.

// Forward only. Outputs (caller-owned, M floats each): logp[M] = log π(target | prefix),
// ent[M] = entropy of π at that row. Gradients untouched.
// Only the M rows are projected to the vocabulary: the hidden states of
// those slots are gathered (get_rows) before the output norm and head, so
// the [V, ·] logits exist for the M rows alone. EMPO_ERR_TOO_LARGE (nothing
// computed) when the graph's compute buffer exceeds the cap.
int empo_model_forward(struct empo_model * m, const struct empo_batch * batch, float * logp, float * ent);

// The compute buffer (bytes, all backends) that the forward graph
// (with_backward = 0) or the training graph (1) of batch needs, measured
// by ggml's allocator on the graph without allocating it; no cap applies.
int empo_model_measure(struct empo_model * m, const struct empo_batch * batch, int with_backward, int64_t * bytes);

// Coefficient callback of a training step, called once from inside the graph
// compute (same thread as empo_model_train), after the forward nodes:
// logp[M], ent[M] (read-only, owned by the library, valid during the call);
// c_logp[M], c_ent[M]: to fill with dL/dlogp and dL/dent (zero-initialised).
// Return 0 to go on with the backward; nonzero aborts the step: the gradient
// accumulators are left as they were and empo_model_train returns
// EMPO_ERR_ABORTED. Must not call back into m.
typedef int (*empo_coef_fn)(void * user, int32_t M, float * logp, float * ent, float * c_logp, float * c_ent);

// One training step in a single graph compute: forward, coef(...), then the
// backward, which adds d/dθ Σ_j (c_logp[j]·logp[j] + c_ent[j]·ent[j]) into the
// gradient accumulators (they add across calls until empo_model_grad_zero).
// The backward flows to the M gathered rows only (GET_ROWS_BACK scatters
// their gradient into the [C, N] hidden states). EMPO_ERR_TOO_LARGE as for
// empo_model_forward.
// logp, ent: as for empo_model_forward (filled also when coef aborts).
// user: passed to coef as is.
int empo_model_train(struct empo_model * m, const struct empo_batch * batch, empo_coef_fn coef, void * user,
                     float * logp, float * ent);

#ifdef __cplusplus
}
#endif
