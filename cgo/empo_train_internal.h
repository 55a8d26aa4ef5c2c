// empo_train_internal.h — the declarations the engine's files share (not an
// API: empo_train.h is the one C API). The graph, in one place:
//
// empo_train.cpp — the ggml training graph of empo2: a frozen Qwen2 policy
// with trainable LoRA pairs, the per-token log-probs of the trained tokens,
// and the exact backward of a policy-gradient objective.
//
// Shape legend (ggml ne order, ne0 contiguous):
//   B    sequences in the micro-batch       T    padded length (longest sequence)
//   N    = T*B token slots (slot t + T*b)   M    trained positions (rows that get logits)
//   C    hidden size (n_embd)               F    FFN size
//   H    query heads                        Hkv  key/value heads (GQA), G = H/Hkv
//   D    head dim = C/H                     V    vocabulary
//   r    LoRA rank                          s    LoRA scale = alpha/r
//
// Forward (per layer, as llama.cpp models/qwen2.cpp):
//   h   = RMSNorm(x)·w_attn_norm                         [C, N]
//   q,k,v = Wq·h+bq, Wk·h+bk, Wv·h+bv (+ s·B·A·h each)    [C|D*Hkv, N]
//   q,k = RoPE_NeoX(q,k; pos, base)                       [D, H|Hkv, N]
//   att = softmax(Kᵀ·Q/√D + causal) ; o = V·att            [T, T, H*B], [D, T, H*B]
//     (a [T, T, H*B] block larger than attn_block: in query chunks [T, Tq, H*B],
//      and in training each chunk's att recomputed in the backward — attention())
//   x  += Wo·o ; x += Wdown·(silu(Wgate·h2) ⊙ Wup·h2)     (h2 = RMSNorm(x)·w_ffn_norm)
// Head: gather the M predicting rows BEFORE the output projection
//   hs = RMSNorm(get_rows(x, rows))·w_out_norm  [C, M];  z = Wout·hs  [V, M]
// Log-probs without underflow (no log of a softmax probability):
//   p = softmax(z); m = Σ_v p·z (= E_p[z]);  S = Σ_v exp(z − m);  lse = m + log S
//   logp = z[target] − lse ;  entropy H = lse − E_p[z] = log S.
//   Because m ≤ max z and max z − m ≤ H ≤ log V, S ∈ [1, V·e^{log V}]: exp never
//   overflows and S never underflows. The gradient through m cancels exactly
//   (∂lse/∂m = 1 − Σ exp(z−m)/S = 0), so any m is exact; E_p[z] is the cheap safe one.
// Objective: computed in float64 by the Go caller from logp/H (PPO, Schulman et
//   al. 2017; dual-clip, Ye et al. 2020; EMPO² low-prob masking; k3 KL), which
//   passes back c_logp[j] = ∂L/∂logp_j and c_ent[j] = ∂L/∂H_j. Backward then
//   differentiates the surrogate  L' = Σ_j c_logp[j]·logp_j + c_ent[j]·H_j,
//   whose gradient equals ∂L/∂θ exactly (chain rule; the coefficients are
//   constants evaluated at the current θ). Clipped tokens have c = 0.
// Backward of frozen linears: y = W·x has ∂L/∂x = Wᵀ·∂L/∂y. ggml autograd emits
//   OUT_PROD(W, (∂L/∂y)ᵀ) (slow on CPU, aborts for F16 W); we rewrite each of
//   those nodes into MUL_MAT(Wᵀ, ∂L/∂y) with Wᵀ a contiguous transposed copy
//   made at load (same type as W; F16 of the dequantized values for quantized
//   W) — or, with transpose_in_graph, the same copy made inside the graph just
//   before its use (in_graph_transposed) — then rebuild the graph so leafs and
//   use counts are right.
// ggml-alloc aliasing: RMS_NORM_BACK / SOFT_MAX_BACK must not be computed in
//   place over their operands (see pin_backward_operands).
// Full training (params.full): no LoRA; every tensor of the F32 GGUF is a
//   parameter placed in the optimizer's flat buffer (order: the file's), so
//   autograd also yields dW = OUT_PROD(x, dY) for every matrix, the norm
//   weights' and biases' gradients (REPEAT_BACK of MUL / ADD), and the token
//   embedding's by GET_ROWS_BACK (tied: plus the output head's OUT_PROD, both
//   added into the one accumulator). dX through W uses the in-graph Wᵀ of the
//   transpose_in_graph mode (the current W: a stored copy would go stale).
// Execution: through ggml_backend_sched over [primary device, CPU] (only
//   [CPU] when the device is the CPU); weights and LoRA tensors live in
//   buffers of the primary device, nothing reads host pointers. A training
//   step is one graph holding forward and backward, computed once: the
//   scheduler's eval callback stops after node n_fwd-1 (the last forward
//   node), reads logp/ent, asks the caller (Go) for the coefficients, writes
//   them into t_clogp/t_cent (a buffer of the primary device, read in place by
//   the two MUL nodes that are pinned to that device) and lets the scheduler
//   go on with the backward nodes. No extra forward is computed.
//
// Files: empo_load.cpp (GGUF, weights, Wᵀ copies, LoRA pairs), empo_forward.cpp
// (the forward graph), empo_attention.cpp (query chunks, recompute, backward
// order), empo_backward.cpp (the training graph and its rewrites),
// empo_step.cpp (scheduler, eval callback / objective driver, compute cap),
// empo_adamw.cpp (the optimizer), empo_train.cpp (the C API).

#pragma once

#include "empo_train.h"
#include "empo_llama.h"
#include "llama.h"

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace empo {

constexpr int EMPO_ATTN_MAX_CHUNKS = 64; // query chunks per layer at most (see attn_rows)

// loss scaling (empo_model_params.loss_scaling; scale_coefficients)
constexpr int EMPO_LOSS_SCALE_LOG2    = 8;   // the largest |coefficient| is scaled into [2^7, 2^8)
constexpr int EMPO_LOSS_SCALE_BACKOFF = 8;   // log2 of the lowering after an overflow
constexpr int EMPO_LOSS_SCALE_RETRIES = 3;   // recomputes of one call before it fails
constexpr int EMPO_LOSS_SCALE_MAX     = 100; // |log2 S| at most (2^±100 is a normal F32)

struct empo_error : std::runtime_error {
    int code;
    empo_error(int code, const std::string & msg) : std::runtime_error(msg), code(code) {}
};

// a frozen linear y = W·x (+ s·B·(A·x))
struct empo_linear {
    ggml_tensor * w  = nullptr; // [n_in, n_out] frozen
    ggml_tensor * wt = nullptr; // [n_out, n_in] frozen transposed copy (null in autograd mode)
    ggml_tensor * a  = nullptr; // [n_in, r]  trainable (lora_a), null if not targeted
    ggml_tensor * b  = nullptr; // [r, n_out] trainable (lora_b)
};

struct graph_inputs {
    ggml_tensor * tokens;  // [N] I32
    ggml_tensor * pos;     // [N] I32
    ggml_tensor * mask;    // [T, T] F32 causal (0 / -inf); null when the attention is chunked (DIAG_MASK_INF)
    ggml_tensor * rows;    // [M] I32
    ggml_tensor * tidx;    // [1, M] I32, target_j: the row of onehot's column j that is 1 (head);
                           // in a forward-only graph (flat) target_j + j·V, z's flat index
    bool          flat;    // forward only: z[target] gathered by GET_ROWS, no one-hot
};

struct empo_layer {
    ggml_tensor * attn_norm = nullptr; // [C]
    ggml_tensor * bq = nullptr;        // [C]
    ggml_tensor * bk = nullptr;        // [D*Hkv]
    ggml_tensor * bv = nullptr;        // [D*Hkv]
    ggml_tensor * ffn_norm  = nullptr; // [C]
    empo_linear   lin[EMPO_TARGET_COUNT]; // q, k, v, o, gate, up, down
};

// The trainable state on a backend: LoRA params, their gradient
// accumulators and the AdamW moments, laid out flat. One buffer holds four
// regions of equal size S = ROW·R floats, seen as 2-D tensors [ROW, R]:
// P (params), G (gradients), M, V (moments), then the 7 hyperparameters of
// GGML_OP_OPT_STEP_ADAMW. Parameter i lives at element off[i] of P, its
// gradient at the same element of G (offsets rounded up to 16 floats; the
// padding is zero and stays zero under AdamW). So the whole optimizer step
// is a handful of nodes over [ROW, R] tensors (rows split across threads)
// instead of 4 per tensor, ZeroGrads is one memset, and no parameter or
// gradient is ever copied to the host for the step.
struct adamw_state {
    static constexpr int64_t ROW = 4096;
    ggml_backend_t             backend = nullptr; // not owned
    std::vector<ggml_tensor *> p, g;              // per-tensor params / grads (placed inside P, G)
    std::vector<int64_t>       off;               // element offset of tensor i in P, G, M, V
    ggml_context *             ctx = nullptr;     // P, G, M, V, hp (no_alloc, placed in buf)
    ggml_backend_buffer_t      buf = nullptr;
    ggml_tensor * P = nullptr, * G = nullptr, * M = nullptr, * V = nullptr;
    ggml_tensor * hp = nullptr;                   // [7] alpha, beta1, beta2, eps, wd, beta1h, beta2h
    ggml_gallocr_t galloc = nullptr;              // scratch of the step graphs, kept across steps

    // allocates the buffer and places params/grads (unallocated F32 tensors of a no_alloc context)
    void init(ggml_backend_t be, const std::vector<ggml_tensor *> & params, const std::vector<ggml_tensor *> & grads);
    void release() {
        if (galloc) ggml_gallocr_free(galloc);
        if (buf) ggml_backend_buffer_free(buf);
        if (ctx) ggml_free(ctx);
        galloc = nullptr; buf = nullptr; ctx = nullptr;
    }
    double step(const empo_adamw_params & prm, bool * clipped);
    double grad_sumsq();                          // Σ G² (row sums on the backend, added in double)
    void   moment_io(int i, int which, float * dst, const float * src, int64_t n);
    void   zero_grads() { ggml_backend_tensor_memset(G, 0, 0, ggml_nbytes(G)); }
    size_t bytes() const { return buf ? ggml_backend_buffer_get_size(buf) : 0; }
};

} // namespace empo

struct empo_model {
    empo_model_params  cfg{};
    empo_model_info    info{};
    float              lora_scale = 1.0f;

    ggml_backend_t        backend     = nullptr; // primary: the chosen device (GPU or CPU)
    ggml_backend_t        backend_cpu = nullptr; // CPU fallback; null when backend is the CPU
    ggml_context *        ctx_w   = nullptr; // frozen weights (no_alloc, in buf_w)
    ggml_backend_buffer_t buf_w   = nullptr;
    ggml_context *        ctx_p   = nullptr; // LoRA params + grad accumulators (placed in opt's buffer)
    int64_t               bytes_transposed = 0;

    ggml_tensor *           tok_embd = nullptr; // [C, V]
    ggml_tensor *           out_norm = nullptr; // [C]
    empo::empo_linear       output;             // w: [C, V] (token_embd when tied)
    std::vector<empo::empo_layer> layers;

    std::vector<ggml_tensor *> params;  // trainable, fixed order
    std::vector<empo_param_info> param_meta; // [same order] name, shape, layer, target, half
    std::string target_tensor[EMPO_TARGET_COUNT]; // llama.cpp tensor name of each target (from the caller)
    std::vector<ggml_tensor *> grads;   // [same shapes] accumulators
    empo::adamw_state          opt;     // AdamW moments beside the params (same buffer type)
    std::unordered_map<const ggml_tensor *, ggml_tensor *> transposed; // W -> Wᵀ

    ggml_backend_sched_t sched = nullptr;         // computes the graphs; its buffers are freed above keep_compute
    ggml_backend_sched_t sched_measure = nullptr; // measures graphs (ggml_backend_sched_reserve_size); never allocates
    int64_t        compute_peak = 0;  // largest measured need since init / empo_model_mem_reset_peak
    int64_t        compute_last = 0;  // measured need of the last graph
    int64_t        compute_cap  = -1; // max_compute in force (< 0: none)
    int64_t        frozen_bytes = 0;  // frozen weights read by the graph (not the Wᵀ copies)
    std::vector<float> grad_saved;    // empo_model_grad_save's snapshot
    bool           grad_has_saved = false;

    // per-call graph state
    ggml_context * ctx_c   = nullptr;
    ggml_cgraph *  graph   = nullptr;
    int            n_fwd   = 0;       // nodes [0, n_fwd) compute logp and ent
    int            M       = 0;
    int            n_rewritten = 0;   // OUT_PROD nodes replaced in the last graph
    int            n_rewritten_op = 0; // other (LoRA) OUT_PROD nodes computed as MUL_MAT in the last graph
    int            n_pinned    = 0;   // *_BACK operands pinned against in-place reuse
    int            attn_chunks = 1;   // query chunks per layer of the last graph
    int            attn_recomputed = 0; // softmaxes recomputed in the last training graph's backward
    int            n_splits    = 0;   // scheduler splits of the last graph
    ggml_tensor *  t_logp  = nullptr; // [1, M]
    ggml_tensor *  t_ent   = nullptr; // [1, M]
    ggml_tensor *  t_clogp = nullptr; // [1, M] in buf_coef (primary device), written by the eval callback
    ggml_tensor *  t_cent  = nullptr; // [1, M] in buf_coef
    ggml_tensor *  t_lgrad = nullptr; // [1]  d(loss)/d(loss) = 1, input
    ggml_context *        ctx_coef = nullptr; // per training call: t_clogp, t_cent
    ggml_backend_buffer_t buf_coef = nullptr;
    empo::graph_inputs   in{};              // token ids, positions, mask, rows, target indices

    // eval-callback state of a training call
    ggml_tensor *  cb_node   = nullptr; // the last forward node: compute stops here for the coefficients
    empo_coef_fn   cb_fn     = nullptr;
    void *         cb_user   = nullptr;
    int            cb_status = 0;       // return value of cb_fn (nonzero: abort)
    bool           cb_done   = false;   // the coefficients were written
    bool           cb_failed = false;   // cb_fn failed or the outputs could not be read
    std::string    cb_err;

    // per-op profile (empo_model_profile): when on, the eval callback asks
    // for every node, so the scheduler computes the graph one node at a time
    // and the time between two callbacks is that node's
    bool           prof_on = false;
    int64_t        prof_last_us = 0;
    std::map<std::string, std::pair<int64_t, int64_t>> prof; // key -> (µs, count)
    std::unordered_set<const ggml_tensor *> prof_fwd;         // forward nodes of the profiled graph

    // node capture (empo_model_capture): when on, the eval callback asks
    // for every node and copies each computed node's output to the host
    bool           cap_on = false;
    int64_t        cap_max_bytes = EMPO_CAPTURE_DEFAULT_BYTES;
    int64_t        cap_bytes = 0;                              // values held (bytes of F32)
    std::unordered_map<const ggml_tensor *, int> cap_index;    // node -> index in the captured graph
    std::vector<empo_node_info>     cap_info;                  // in compute order
    std::vector<std::vector<float>> cap_data;                  // [same order] values (empty: none)
    std::string    cap_err;                                    // first failure inside the callback

    // loss scaling (empo_model_params.loss_scaling; empo_step.cpp)
    bool           ls_on    = false;  // resolved at init
    int            ls_log2  = 0;      // log2 S of the last training graph
    int            ls_shift = 0;      // lowering of the current call after overflows
    int64_t        ls_skips = 0;      // graphs recomputed at a lower scale since init
    ggml_tensor *  t_unscale = nullptr; // [1] 1/S in buf_coef, written by the eval callback
    std::vector<ggml_tensor *> unscale_nodes; // the MULs that read it (pinned to the primary device)
    std::vector<float> cb_cl, cb_ce;  // the call's coefficients as the caller gave them (kept for a recompute)
    bool           cb_have  = false;  // cb_cl/cb_ce hold this call's coefficients

    std::string err;
};

namespace empo {

// One query chunk of one layer's attention, kept for recompute_attention.
struct attn_chunk {
    ggml_tensor * k;     // [D, T, Hkv*B]   the layer's keys (a forward node)
    ggml_tensor * q;     // [D, Tq, H*B]    the chunk's queries (a forward node)
    ggml_tensor * mask;  // [T, T]          the causal mask (unchunked), or null: DIAG_MASK_INF from row t0
    int           t0;    // the chunk's first query row
    ggml_tensor * y;     // [T, Tq, H*B]    the forward's softmax
    ggml_tensor * o;     // [D, Tq, H*B]    the chunk's output V·y
    float         scale; // 1/√D
};

// The chunk-sized tensors of a recomputed attention chunk — y', the
// incoming dY = ∂L/∂y (OUT_PROD(V, dOᵀ)), SOFT_MAX_BACK's dS and its
// transposed copies — are read by three reducers whose outputs are small:
// dV's OUT_PROD(y', dO) [T, D, H*B] and the two products of dS, for dK
// [D, T, H*B] and dQ [D, Tq, H*B]. Autograd sums each over the chunks in its
// own chain (ADD for dK and dV, ACC for dQ), and the graph's DFS from the
// parameters' gradients follows one chain to its end before the next, so
// left alone it computes every chunk's y' and dS for the first chain and
// keeps them, or the other reducers' [T, D, H*B] outputs, until the other
// chains reach them: T² again. order_attn_backward adds the backward to
// the graph chunk by chunk instead (ggml_build_forward_expand, one node at a
// time, in the chains' own order): a chunk's three reducers, then the node
// of each chain that takes its contribution, so that ggml-alloc frees the
// chunk's tensors and its reducers' outputs before the next chunk's exist.
struct attn_reducers {
    std::vector<std::vector<ggml_tensor *>> of; // per chunk: the reducers
    std::vector<int> first;                     // per chunk: gf index of its first reducer (the chains' order)
};

// empo_load.cpp
void load_model(empo_model & m, const char * path);
void load_shared(empo_model & m, const empo_llama_weights & lw, int64_t file_type);
ggml_backend_dev_t shared_device(const empo_llama_weights & lw);
ggml_type transposed_type(ggml_type type);

// empo_forward.cpp
void build_forward(empo_model & m, ggml_context * ctx, int B, int T, int M, int Tq, graph_inputs & in,
                   std::vector<attn_chunk> * chunks, ggml_tensor ** out_logp, ggml_tensor ** out_ent);
void set_inputs(empo_model & m, const empo_batch & b);

// empo_attention.cpp
int64_t attn_block_bytes(const empo_model & m, int B, int T, int64_t rows);
int attn_rows(const empo_model & m, int B, int T);
ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                        float scale, int Tq, std::vector<attn_chunk> * chunks);
std::vector<ggml_tensor *> recompute_attention(ggml_context * ctx, ggml_cgraph * gf, const std::vector<attn_chunk> & chunks,
                                               const std::unordered_set<const ggml_tensor *> & fwd);
attn_reducers find_attn_reducers(ggml_cgraph * gf, const std::vector<ggml_tensor *> & redone,
                                 const std::unordered_set<const ggml_tensor *> & fwd);
void order_attn_backward(ggml_cgraph * gb, ggml_cgraph * gf, const attn_reducers & r);

// empo_backward.cpp
void build_graph(empo_model & m, const empo_batch & b, bool with_backward,
                 ggml_tensor ** mul_lp_out, ggml_tensor ** mul_en_out);
size_t graph_size(const empo_model & m, int chunks);
int max_attn_chunks(const empo_model & m);
void drop_graph(empo_model & m);
int unscale_param_grads(empo_model & m, ggml_context * ctx, ggml_cgraph * gf);

// empo_step.cpp
bool is_view_op(ggml_op op);
void cap_clear(empo_model & m);
bool sched_eval_cb(ggml_tensor * t, bool ask, void * user_data);
ggml_backend_sched_t new_sched(empo_model & m);
int64_t sched_alloc_bytes(const empo_model & m);
void check_batch(const empo_model & m, const empo_batch & b);
int64_t measure_graph(empo_model & m);
void run(empo_model & m, const empo_batch & b, empo_coef_fn coef, void * user, float * logp, float * ent);
int64_t default_compute_cap(empo_model & m, int32_t ref_tokens);
int64_t frozen_bytes(const empo_model & m);
bool loss_scaling_applies(const empo_model & m);

} // namespace empo
