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
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr int EMPO_ATTN_MAX_CHUNKS = 64; // query chunks per layer at most (see attn_rows)

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
    ggml_tensor * tidx;    // [1, M] I32, target_j: the row of onehot's column j that is 1 (head)
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
    void   moment_io(int i, int which, float * dst, const float * src, int64_t n);
    void   zero_grads() { ggml_backend_tensor_memset(G, 0, 0, ggml_nbytes(G)); }
    size_t bytes() const { return buf ? ggml_backend_buffer_get_size(buf) : 0; }
};

} // namespace

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
    empo_linear             output;             // w: [C, V] (token_embd when tied)
    std::vector<empo_layer> layers;

    std::vector<ggml_tensor *> params;  // trainable, fixed order
    std::vector<empo_param_info> param_meta; // [same order] name, shape, layer, target, half
    std::string target_tensor[EMPO_TARGET_COUNT]; // llama.cpp tensor name of each target (from the caller)
    std::vector<ggml_tensor *> grads;   // [same shapes] accumulators
    adamw_state                opt;     // AdamW moments beside the params (same buffer type)
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
    graph_inputs   in{};              // token ids, positions, mask, rows, target indices

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

    std::string err;
};

namespace {

// ---------------------------------------------------------------- GGUF loading

static int64_t gguf_int(const gguf_context * g, const std::string & key, int64_t def, bool required) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) {
        if (required) throw empo_error(EMPO_ERR_ARCH, "missing GGUF key " + key);
        return def;
    }
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8 (g, id);
        case GGUF_TYPE_INT8:   return gguf_get_val_i8 (g, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(g, id);
        case GGUF_TYPE_INT16:  return gguf_get_val_i16(g, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(g, id);
        case GGUF_TYPE_INT32:  return gguf_get_val_i32(g, id);
        case GGUF_TYPE_UINT64: return (int64_t) gguf_get_val_u64(g, id);
        case GGUF_TYPE_INT64:  return gguf_get_val_i64(g, id);
        default: throw empo_error(EMPO_ERR_ARCH, "GGUF key " + key + " is not an integer");
    }
}

static float gguf_float(const gguf_context * g, const std::string & key, float def) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) return def;
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(g, id);
        case GGUF_TYPE_FLOAT64: return (float) gguf_get_val_f64(g, id);
        default: return (float) gguf_int(g, key, 0, true);
    }
}

// The tensors of a GGUF model: one file, or every file of a model split by
// llama.cpp's gguf-split convention (given the first: split.count files
// named by llama_split_path, each with split.no, the metadata in the first,
// split.tensors.count tensors in all). Tensor ids run over the splits in
// order.
struct gguf_source {
    std::vector<gguf_context *> g;              // one per split; g[0] holds the metadata
    std::vector<FILE *>         f;
    std::vector<std::pair<int, int64_t>> at;    // tensor id -> (split, id in that split)
    std::unordered_map<std::string, int64_t> by_name;
    ~gguf_source() {
        for (gguf_context * x : g) gguf_free(x);
        for (FILE * x : f) fclose(x);
    }

    const gguf_context * meta() const { return g[0]; }
    int64_t n() const { return (int64_t) at.size(); }
    int64_t find(const std::string & name) const {
        auto it = by_name.find(name);
        return it == by_name.end() ? -1 : it->second;
    }
    ggml_type    type(int64_t id) const { return gguf_get_tensor_type(g[at[id].first], at[id].second); }
    size_t       size(int64_t id) const { return gguf_get_tensor_size(g[at[id].first], at[id].second); }
    const char * name(int64_t id) const { return gguf_get_tensor_name(g[at[id].first], at[id].second); }

    // opens one file and indexes its tensors
    void add(const std::string & path) {
        gguf_init_params gp = { /*no_alloc =*/ true, /*ctx =*/ nullptr };
        FILE * fp = fopen(path.c_str(), "rb");
        if (!fp) throw empo_error(EMPO_ERR_IO, "cannot open " + path);
        f.push_back(fp);
        gguf_context * c = gguf_init_from_file(path.c_str(), gp);
        if (!c) throw empo_error(EMPO_ERR_IO, "not a readable GGUF file: " + path);
        g.push_back(c);
        const int k = (int) g.size() - 1;
        for (int64_t i = 0; i < gguf_get_n_tensors(c); ++i) {
            if (!by_name.emplace(gguf_get_tensor_name(c, i), n()).second) {
                throw empo_error(EMPO_ERR_ARCH, std::string("tensor ") + gguf_get_tensor_name(c, i) + " appears twice in " + path);
            }
            at.push_back({k, i});
        }
    }

    // raw bytes of tensor `id` (its GGUF type and layout)
    std::vector<uint8_t> read(int64_t id) const {
        const gguf_context * c = g[at[id].first];
        const int64_t i = at[id].second;
        const size_t off  = gguf_get_data_offset(c) + gguf_get_tensor_offset(c, i);
        const size_t sz   = gguf_get_tensor_size(c, i);
        std::vector<uint8_t> buf(sz);
        FILE * fp = f[at[id].first];
        if (fseeko(fp, (off_t) off, SEEK_SET) != 0 || fread(buf.data(), 1, sz, fp) != sz) {
            throw empo_error(EMPO_ERR_IO, std::string("short read of tensor ") + gguf_get_tensor_name(c, i));
        }
        return buf;
    }
};

// the u16 split key `key` of c, or -1 when absent
static int split_key(const gguf_context * c, const char * key) {
    const int64_t id = gguf_find_key(c, key);
    if (id < 0) return -1;
    if (gguf_get_kv_type(c, id) != GGUF_TYPE_UINT16) throw empo_error(EMPO_ERR_ARCH, std::string(key) + " is not a u16");
    return gguf_get_val_u16(c, id);
}

// opens path and, when it is the first file of a split model, the others
static void open_source(gguf_source & src, const char * path) {
    src.add(path);
    const int n = split_key(src.meta(), "split.count");
    if (n <= 1) return;
    if (split_key(src.meta(), "split.no") != 0) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + " is not the first split of its model: load that one");
    }
    std::vector<char> buf(strlen(path) + 64);
    if (llama_split_prefix(buf.data(), buf.size(), path, 0, n) <= 0) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + ": the first of " + std::to_string(n) + " splits must be named <prefix>-00001-of-" +
                         std::to_string(100000 + n).substr(1) + ".gguf");
    }
    const std::string prefix = buf.data();
    for (int i = 1; i < n; ++i) {
        llama_split_path(buf.data(), buf.size(), prefix.c_str(), i, n);
        const std::string sp = buf.data();
        src.add(sp);
        if (split_key(src.g.back(), "split.no") != i || split_key(src.g.back(), "split.count") != n) {
            throw empo_error(EMPO_ERR_IO, sp + " is not split " + std::to_string(i + 1) + " of " + std::to_string(n));
        }
    }
    const int64_t kid = gguf_find_key(src.meta(), "split.tensors.count");
    if (kid < 0 || gguf_get_kv_type(src.meta(), kid) != GGUF_TYPE_INT32 || gguf_get_val_i32(src.meta(), kid) != src.n()) {
        throw empo_error(EMPO_ERR_IO, std::string(path) + ": split.tensors.count does not match the " + std::to_string(src.n()) + " tensors of the splits");
    }
}

// convert n elements of type `type` to F32
static std::vector<float> to_f32(const std::vector<uint8_t> & src, ggml_type type, int64_t n) {
    std::vector<float> out(n);
    if (type == GGML_TYPE_F32) {
        memcpy(out.data(), src.data(), n * sizeof(float));
        return out;
    }
    const auto * tr = ggml_get_type_traits(type);
    if (!tr || !tr->to_float) throw empo_error(EMPO_ERR_ARCH, std::string("cannot convert tensor type ") + ggml_type_name(type));
    tr->to_float(src.data(), out.data(), n);
    return out;
}

// transpose a [n0, n1] matrix of `esize`-byte elements into [n1, n0]
static std::vector<uint8_t> transpose_bytes(const std::vector<uint8_t> & src, int64_t n0, int64_t n1, size_t esize) {
    std::vector<uint8_t> dst(src.size());
    for (int64_t i1 = 0; i1 < n1; ++i1) {
        for (int64_t i0 = 0; i0 < n0; ++i0) {
            memcpy(&dst[(i0 * n1 + i1) * esize], &src[(i1 * n0 + i0) * esize], esize);
        }
    }
    return dst;
}

struct pending_upload {
    ggml_tensor *        t;
    std::vector<uint8_t> data;
};

// The type of Wᵀ for a frozen matrix of type `type`: its own, F16 for
// quantized types (their blocks run along rows, so Wᵀ holds the dequantized
// values), both stored and made in the graph.
static ggml_type transposed_type(ggml_type type) {
    return ggml_is_quantized(type) ? GGML_TYPE_F16 : type;
}

// The tensor Wᵀ [n1, n0] of a frozen matrix t [n0, n1] (transposed_type), or
// nullptr with transpose_in_graph (the training graph then makes Wᵀ just
// before its use: in_graph_transposed). Registers m.transposed[t].
static ggml_tensor * new_transposed(empo_model & m, ggml_tensor * t) {
    if (m.cfg.transpose_in_graph) {
        m.transposed[t] = nullptr; // frozen; Wᵀ is made inside each training graph
        return nullptr;
    }
    ggml_tensor * tt = ggml_new_tensor_2d(m.ctx_w, transposed_type(t->type), t->ne[1], t->ne[0]);
    ggml_format_name(tt, "%s.T", t->name);
    m.transposed[t] = tt;
    m.bytes_transposed += (int64_t) ggml_nbytes(tt);
    return tt;
}

// the bytes of tt = Wᵀ from W's bytes raw (type st, [n0, n1])
static std::vector<uint8_t> transposed_data(const std::vector<uint8_t> & raw, ggml_type st, int64_t n0, int64_t n1, const ggml_tensor * tt) {
    if (!ggml_is_quantized(st)) return transpose_bytes(raw, n0, n1, ggml_type_size(st));
    std::vector<float> f  = to_f32(raw, st, n0 * n1);
    std::vector<uint8_t> ft = transpose_bytes(
        std::vector<uint8_t>((const uint8_t *) f.data(), (const uint8_t *) (f.data() + f.size())), n0, n1, sizeof(float));
    std::vector<uint8_t> h(ggml_nbytes(tt));
    ggml_fp32_to_fp16_row((const float *) ft.data(), (ggml_fp16_t *) h.data(), n0 * n1);
    return h;
}

static void add_transposed(empo_model & m, std::vector<pending_upload> & uploads, ggml_tensor * t, const std::vector<uint8_t> & raw) {
    if (ggml_tensor * tt = new_transposed(m, t)) uploads.push_back({tt, transposed_data(raw, t->type, t->ne[0], t->ne[1], tt)});
}

// the error for a tensor whose type the graph cannot train on
static empo_error type_error(const std::string & name, ggml_type type,
                             const char * why = "the training graph reads F32, F16, BF16 and quantized types with a CPU dot product") {
    return empo_error(EMPO_ERR_TYPE, "tensor " + name + " has type " + ggml_type_name(type) + ", which cannot be trained on (" + why + ")");
}

// can the training graph read a frozen matrix of this type as it is (mul_mat
// on the CPU, and a transposed copy)?
static bool usable_matrix_type(ggml_type type) {
    if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) return true;
    const auto * tr = ggml_get_type_traits(type);
    return ggml_is_quantized(type) && tr && tr->to_float && ggml_get_type_traits_cpu(type)->vec_dot;
}

// the LoRA pair of target k in block il: A [n_in, r], B [r, n_out], params
// with persistent gradient accumulators (created in ctx_p, placed later by
// adamw_state::init), metadata for empo_model_param_info
static void add_lora(empo_model & m, empo_linear & lin, int il, int k, const std::string & base, int64_t n_in, int64_t n_out) {
    const int r = m.cfg.lora_rank;
    lin.a = ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, n_in, r);
    lin.b = ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, r, n_out);
    ggml_set_name(lin.a, (base + ".lora_a").c_str());
    ggml_set_name(lin.b, (base + ".lora_b").c_str());
    ggml_set_param(lin.a);
    ggml_set_param(lin.b);
    m.params.push_back(lin.a);
    m.params.push_back(lin.b);
    for (ggml_tensor * t : { lin.a, lin.b }) {
        empo_param_info pi{};
        snprintf(pi.name, sizeof(pi.name), "%s", t->name);
        pi.ne[0]  = t->ne[0];
        pi.ne[1]  = t->ne[1];
        pi.layer  = il;
        pi.target = k;
        pi.is_b   = t == lin.b ? 1 : 0;
        m.param_meta.push_back(pi);
    }
}

// checks shared by both loaders
static void check_hparams(const empo_model_info & hp) {
    if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_ff <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 ||
        hp.n_ctx <= 0 || hp.n_vocab <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_head % hp.n_head_kv != 0) {
        throw empo_error(EMPO_ERR_ARCH, "inconsistent qwen2 hyperparameters");
    }
    if ((hp.n_embd / hp.n_head) % 2 != 0) throw empo_error(EMPO_ERR_ARCH, "odd head dim: NeoX RoPE needs an even one");
    if (!(std::isfinite(hp.rope_base) && hp.rope_base > 0 && std::isfinite(hp.norm_eps) && hp.norm_eps > 0)) {
        throw empo_error(EMPO_ERR_ARCH, "bad rope base or norm eps");
    }
}

struct weight_loader {
    empo_model &  m;
    gguf_source & src;
    std::vector<pending_upload> uploads;

    // full training: tensor `id` becomes a trainable F32 parameter [n0, n1]
    // (n1 = 0: 1-D [n0]) in ctx_p, placed in the optimizer's flat buffer by
    // adamw_state::init and uploaded after it, like every other tensor. Only
    // F32 files: the trained base is written back as F32, and a silent
    // F16 → F32 conversion would double the file and change the model's type.
    ggml_tensor * param(const std::string & name, int64_t id, int64_t n0, int64_t n1) {
        const ggml_type type = src.type(id);
        if (type != GGML_TYPE_F32) {
            throw empo_error(EMPO_ERR_CONFIG, "full training needs an F32 model: tensor " + name + " is " +
                             ggml_type_name(type) + " (use an F32 GGUF, or train a LoRA adapter)");
        }
        ggml_tensor * t = n1 > 0 ? ggml_new_tensor_2d(m.ctx_p, GGML_TYPE_F32, n0, n1)  // [n0, n1]
                                 : ggml_new_tensor_1d(m.ctx_p, GGML_TYPE_F32, n0);     // [n0]
        ggml_set_name(t, name.c_str());
        ggml_set_param(t);
        m.params.push_back(t);
        std::vector<uint8_t> raw = src.read(id);
        uploads.push_back({t, std::move(raw)});
        return t;
    }

    // 1-D tensor (norm weight or bias) stored as F32 [n]
    ggml_tensor * vec(const std::string & name, int64_t n, bool required = true) {
        const int64_t id = src.find(name);
        if (id < 0) {
            if (required) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + name);
            return nullptr;
        }
        const ggml_type type = src.type(id);
        if ((int64_t) (src.size(id) / ggml_type_size(type) * ggml_blck_size(type)) != n) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " has an unexpected size");
        }
        if (m.cfg.full) return param(name, id, n, 0);
        const auto * tr = ggml_get_type_traits(type);
        if (type != GGML_TYPE_F32 && !(tr && tr->to_float)) throw type_error(name, type);
        ggml_tensor * t = ggml_new_tensor_1d(m.ctx_w, GGML_TYPE_F32, n);
        ggml_set_name(t, name.c_str());
        std::vector<float> f = to_f32(src.read(id), type, n);
        std::vector<uint8_t> bytes(n * sizeof(float));
        memcpy(bytes.data(), f.data(), bytes.size());
        uploads.push_back({t, std::move(bytes)});
        return t;
    }

    // 2-D matrix [n0, n1]. Storage: F32/F16/BF16 and quantized types with a
    // CPU dot product are kept as they are (mul_mat reads them); force_f32
    // (autograd mode, whose OUT_PROD handles F32 only) converts to F32.
    // want_t adds Wᵀ [n1, n0]: same type for F32/F16/BF16, F16 for quantized
    // types (their blocks run along rows, so they cannot be transposed as is).
    ggml_tensor * mat(const std::string & name, int64_t n0, int64_t n1, bool force_f32, bool want_t) {
        const int64_t id = src.find(name);
        if (id < 0) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + name);
        const ggml_type type = src.type(id);
        const size_t want = ggml_row_size(type, n0) * n1;
        if (n0 % ggml_blck_size(type) != 0 || src.size(id) != want) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " has an unexpected shape (want ne=[" +
                             std::to_string(n0) + "," + std::to_string(n1) + "])");
        }
        if (m.cfg.full) {
            m.info.wtype = GGML_TYPE_F32;
            return param(name, id, n0, n1);
        }
        if (!usable_matrix_type(type)) throw type_error(name, type);
        const ggml_type st = force_f32 ? GGML_TYPE_F32 : type;
        ggml_tensor * t = ggml_new_tensor_2d(m.ctx_w, st, n0, n1);
        ggml_set_name(t, name.c_str());
        std::vector<uint8_t> raw = src.read(id);
        if (st != type) {
            std::vector<float> f = to_f32(raw, type, n0 * n1);
            raw.assign((const uint8_t *) f.data(), (const uint8_t *) (f.data() + f.size()));
        }
        if (want_t) add_transposed(m, uploads, t, raw);
        uploads.push_back({t, std::move(raw)});
        if (m.info.wtype < 0 || st != GGML_TYPE_F32) m.info.wtype = st;
        return t;
    }
};

// Full training: put the parameters (created by weight_loader::param in the
// loader's order) into the GGUF file's tensor order, the one documented order
// of empo_model_param_info, and fill their metadata (layer = block index or
// -1, target = -1: no LoRA). Every tensor of the file must be a parameter of
// the graph: an unknown tensor would be left untrained in the written base.
// In the default backward mode every matrix read by MUL_MAT is registered
// for rewrite_frozen_backward with no stored copy, so dX = Wᵀ·dY uses a CONT
// of transpose(W) made in the graph from the current (trained) W.
static void order_full_params(empo_model & m, const gguf_source & src) {
    std::unordered_map<std::string, ggml_tensor *> by_name;
    for (ggml_tensor * t : m.params) by_name[t->name] = t;
    std::vector<ggml_tensor *> ordered;
    const int64_t n = src.n();
    for (int64_t i = 0; i < n; ++i) {
        const std::string name = src.name(i);
        auto it = by_name.find(name);
        if (it == by_name.end()) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + name + " is not part of the qwen2 training graph: full training would leave it untrained");
        }
        ordered.push_back(it->second);
        by_name.erase(it);
    }
    if (ordered.size() != m.params.size()) throw empo_error(EMPO_ERR_INTERNAL, "full training: parameters and file tensors differ");
    m.params = ordered;
    m.param_meta.clear();
    for (ggml_tensor * t : m.params) {
        empo_param_info pi{};
        snprintf(pi.name, sizeof(pi.name), "%s", t->name);
        pi.ne[0]  = t->ne[0];
        pi.ne[1]  = t->ne[1];
        pi.layer  = -1;
        int blk = -1, len = 0;
        if (sscanf(t->name, "blk.%d.%n", &blk, &len) == 1 && len > 0) pi.layer = blk;
        pi.target = -1;
        pi.is_b   = 0;
        m.param_meta.push_back(pi);
    }
    if (!m.cfg.autograd_frozen) {
        m.transposed[m.output.w] = nullptr; // token_embd when tied
        for (const empo_layer & L : m.layers) {
            for (const empo_linear & lin : L.lin) m.transposed[lin.w] = nullptr;
        }
    }
}

static void load_model(empo_model & m, const char * path) {
    gguf_source src;
    open_source(src, path);
    const gguf_context * g = src.meta();

    // ---- hyperparameters
    const int64_t kid = gguf_find_key(g, "general.architecture");
    if (kid < 0 || gguf_get_kv_type(g, kid) != GGUF_TYPE_STRING) throw empo_error(EMPO_ERR_ARCH, "GGUF has no general.architecture");
    const std::string arch = gguf_get_val_str(g, kid);
    if (arch != "qwen2") throw empo_error(EMPO_ERR_ARCH, "architecture \"" + arch + "\" is not supported (only qwen2)");

    empo_model_info & hp = m.info;
    hp.n_layer   = (int) gguf_int(g, arch + ".block_count", 0, true);
    hp.n_embd    = (int) gguf_int(g, arch + ".embedding_length", 0, true);
    hp.n_ff      = (int) gguf_int(g, arch + ".feed_forward_length", 0, true);
    hp.n_head    = (int) gguf_int(g, arch + ".attention.head_count", 0, true);
    hp.n_head_kv = (int) gguf_int(g, arch + ".attention.head_count_kv", hp.n_head, false);
    hp.n_ctx     = (int) gguf_int(g, arch + ".context_length", 0, true);
    hp.rope_base = gguf_float(g, arch + ".rope.freq_base", 10000.0f);
    hp.norm_eps  = gguf_float(g, arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
    if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_ff <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 ||
        hp.n_ctx <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_head % hp.n_head_kv != 0) {
        throw empo_error(EMPO_ERR_ARCH, "inconsistent qwen2 hyperparameters");
    }
    if ((int64_t) hp.n_layer * 9 > src.n()) { // each block has ≥ 9 tensors; also bounds every size below
        throw empo_error(EMPO_ERR_ARCH, "block_count " + std::to_string(hp.n_layer) + " does not match the tensors in the file");
    }
    hp.n_embd_head = hp.n_embd / hp.n_head;
    if (hp.n_embd_head % 2 != 0) throw empo_error(EMPO_ERR_ARCH, "odd head dim: NeoX RoPE needs an even one");
    {
        // RoPE scaling (YaRN, linear, ...) is not built into this graph: refuse
        // it rather than train a model whose positions differ from llama.cpp's
        const int64_t sid = gguf_find_key(g, (arch + ".rope.scaling.type").c_str());
        std::string scaling = "none";
        if (sid >= 0) {
            if (gguf_get_kv_type(g, sid) != GGUF_TYPE_STRING) throw empo_error(EMPO_ERR_ARCH, "rope.scaling.type is not a string");
            scaling = gguf_get_val_str(g, sid);
        }
        if (scaling != "none") throw empo_error(EMPO_ERR_ARCH, "RoPE scaling \"" + scaling + "\" is not supported");
        const float fs = gguf_float(g, arch + ".rope.scale_linear", 1.0f);
        if (fs != 1.0f && fs != 0.0f) throw empo_error(EMPO_ERR_ARCH, "linear RoPE scaling is not supported");
    }
    const int64_t key_len = gguf_int(g, arch + ".attention.key_length", hp.n_embd_head, false);
    const int64_t val_len = gguf_int(g, arch + ".attention.value_length", hp.n_embd_head, false);
    if (key_len != hp.n_embd_head || val_len != hp.n_embd_head) {
        throw empo_error(EMPO_ERR_ARCH, "head dim != n_embd/n_head is not supported");
    }
    if (!(std::isfinite(hp.rope_base) && hp.rope_base > 0 && std::isfinite(hp.norm_eps) && hp.norm_eps > 0)) {
        throw empo_error(EMPO_ERR_ARCH, "bad rope base or norm eps");
    }
    {
        const int64_t id = src.find("token_embd.weight");
        if (id < 0) throw empo_error(EMPO_ERR_ARCH, "missing tensor token_embd.weight");
        const ggml_type t = gguf_get_tensor_type(g, id);
        const size_t row = ggml_row_size(t, hp.n_embd);
        if (row == 0 || gguf_get_tensor_size(g, id) % row != 0) throw empo_error(EMPO_ERR_ARCH, "bad token_embd.weight");
        hp.n_vocab = (int) (gguf_get_tensor_size(g, id) / row);
    }
    hp.tied  = src.find("output.weight") < 0 ? 1 : 0;
    hp.wtype = -1;

    const int64_t C = hp.n_embd, F = hp.n_ff, V = hp.n_vocab;
    const int64_t Dkv = (int64_t) hp.n_embd_head * hp.n_head_kv;
    const bool    full = m.cfg.full;
    // full training has no stored transposed copies (they would go stale):
    // every matrix is read as it is, like the autograd mode
    const bool    ag  = m.cfg.autograd_frozen || full;
    const int     r   = m.cfg.lora_rank;
    m.lora_scale = m.cfg.lora_alpha != 0.0f ? m.cfg.lora_alpha / (float) r : 1.0f;
    hp.full = full ? 1 : 0;

    // ---- tensors (metadata only; data uploaded after allocation)
    const int n_tensors = 8 + hp.n_layer * (12 + EMPO_TARGET_COUNT);
    {
        ggml_init_params ip = { ggml_tensor_overhead() * (size_t) n_tensors, nullptr, true };
        m.ctx_w = ggml_init(ip);
        // LoRA: A, B and their gradients per target; full: every tensor and its gradient
        const int n_p = std::max(2 * 2 * EMPO_TARGET_COUNT * hp.n_layer + 4, 2 * n_tensors);
        ggml_init_params pp = { ggml_tensor_overhead() * (size_t) n_p, nullptr, true };
        m.ctx_p = ggml_init(pp);
        if (!m.ctx_w || !m.ctx_p) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    }
    weight_loader wl{m, src, {}};
    {
        // the token embedding: get_rows reads any type
        const bool tied_t = hp.tied && !ag;
        m.tok_embd = wl.mat("token_embd.weight", C, V, ag && hp.tied, tied_t);
        m.out_norm = wl.vec("output_norm.weight", C);
        if (hp.tied) {
            m.output.w  = m.tok_embd;
            m.output.wt = tied_t ? m.transposed[m.tok_embd] : nullptr;
        } else {
            m.output.w  = wl.mat("output.weight", C, V, ag, !ag);
            m.output.wt = ag ? nullptr : m.transposed[m.output.w];
        }
    }
    const int64_t n_in [EMPO_TARGET_COUNT] = { C, C,   C,   C, C, C, F };
    const int64_t n_out[EMPO_TARGET_COUNT] = { C, Dkv, Dkv, C, F, F, C };
    m.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        empo_layer & L = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = wl.vec(p + "attn_norm.weight", C);
        L.ffn_norm  = wl.vec(p + "ffn_norm.weight", C);
        L.bq = wl.vec(p + "attn_q.bias", C,   false);
        L.bk = wl.vec(p + "attn_k.bias", Dkv, false);
        L.bv = wl.vec(p + "attn_v.bias", Dkv, false);
        if (src.find(p + "attn_output.bias") >= 0) throw empo_error(EMPO_ERR_ARCH, "attn_output.bias is not a qwen2 tensor");
        for (int k = 0; k < EMPO_TARGET_COUNT; ++k) {
            const std::string base = p + m.target_tensor[k] + ".weight";
            empo_linear & lin = L.lin[k];
            lin.w  = wl.mat(base, n_in[k], n_out[k], ag, !ag);
            lin.wt = ag ? nullptr : m.transposed[lin.w];
            if (!full && (m.cfg.lora_targets & (1u << k))) add_lora(m, lin, il, k, base, n_in[k], n_out[k]);
        }
    }
    if (full) order_full_params(m, src);
    for (ggml_tensor * t : m.params) {
        ggml_tensor * gacc = ggml_dup_tensor(m.ctx_p, t);
        ggml_format_name(gacc, "grad_acc.%s", t->name);
        m.grads.push_back(gacc);
    }
    if (m.params.empty()) throw empo_error(EMPO_ERR_CONFIG, "no LoRA targets selected");

    // ---- allocate on the backend and upload
    // buffers of the primary device (device memory for a GPU): every read and
    // write goes through ggml_backend_tensor_get/set
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(m.backend);
    if (ggml_get_first_tensor(m.ctx_w)) { // empty in full training: every tensor is a parameter
        m.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_w, buft);
        if (!m.buf_w) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate weight buffers");
        // WEIGHTS usage: the scheduler runs ops that read these tensors on their
        // backend (ggml_backend_sched_backend_id_from_cur); without it nothing
        // would pull the graph onto the device and it would run on the CPU fallback
        ggml_backend_buffer_set_usage(m.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    // trainable params (LoRA pairs, or every tensor in full training),
    // gradient accumulators and AdamW moments: one flat buffer of the same
    // buffer type (adamw_state), zeroed, also marked WEIGHTS
    m.opt.init(m.backend, m.params, m.grads);
    for (auto & u : wl.uploads) {
        ggml_backend_tensor_set(u.t, u.data.data(), 0, u.data.size());
        std::vector<uint8_t>().swap(u.data);
    }
}


// Build on a loaded llama.cpp model's own tensors (frozen weights once per
// process): matrices, norms and biases are llama.cpp's (whatever buffer they
// live in: the mmap of the GGUF on the CPU, device memory when offloaded);
// only the transposed copies Wᵀ (none with transpose_in_graph), the LoRA
// params, gradients and moments are allocated here.
static void load_shared(empo_model & m, const empo_llama_weights & lw) {
    if (lw.arch != "qwen2") throw empo_error(EMPO_ERR_ARCH, "architecture \"" + lw.arch + "\" is not supported (only qwen2)");
    if (m.cfg.autograd_frozen) throw empo_error(EMPO_ERR_CONFIG, "the autograd backward converts weights to F32: it cannot share llama.cpp's weights");
    empo_model_info & hp = m.info;
    hp.n_layer = lw.n_layer; hp.n_embd = lw.n_embd; hp.n_ff = lw.n_ff; hp.n_head = lw.n_head; hp.n_head_kv = lw.n_head_kv;
    hp.n_ctx = lw.n_ctx_train; hp.rope_base = lw.rope_base; hp.norm_eps = lw.norm_eps; hp.n_vocab = lw.n_vocab;
    check_hparams(hp);
    hp.n_embd_head = hp.n_embd / hp.n_head;
    if (lw.rope_scaling) throw empo_error(EMPO_ERR_ARCH, "RoPE scaling is not supported");
    if (lw.n_embd_head_k != hp.n_embd_head || lw.n_embd_head_v != hp.n_embd_head) throw empo_error(EMPO_ERR_ARCH, "head dim != n_embd/n_head is not supported");
    if (lw.output_b) throw empo_error(EMPO_ERR_ARCH, "output.bias is not a qwen2 tensor");
    if ((int) lw.layers.size() != hp.n_layer) throw empo_error(EMPO_ERR_ARCH, "layer count mismatch");
    hp.tied  = lw.tied || !lw.output ? 1 : 0;
    hp.wtype = -1;
    const int64_t C = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, Dkv = (int64_t) hp.n_embd_head * hp.n_head_kv;
    m.lora_scale = m.cfg.lora_alpha != 0.0f ? m.cfg.lora_alpha / (float) m.cfg.lora_rank : 1.0f;
    {
        ggml_init_params ip = { ggml_tensor_overhead() * (size_t) (8 + hp.n_layer * EMPO_TARGET_COUNT), nullptr, true };
        m.ctx_w = ggml_init(ip);
        ggml_init_params pp = { ggml_tensor_overhead() * (size_t) (2 * 2 * EMPO_TARGET_COUNT * hp.n_layer + 4), nullptr, true };
        m.ctx_p = ggml_init(pp);
        if (!m.ctx_w || !m.ctx_p) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    }
    // (W, Wᵀ) pairs whose data is made after allocation, one matrix at a time,
    // so that no more than one matrix is ever held twice in host memory
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> deferred;
    auto mat = [&](ggml_tensor * w, const std::string & what, int64_t n0, int64_t n1, bool want_t) {
        if (!w) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + what);
        if (w->ne[0] != n0 || w->ne[1] != n1 || w->ne[2] != 1 || w->ne[3] != 1 || !ggml_is_contiguous(w)) {
            throw empo_error(EMPO_ERR_ARCH, "tensor " + what + " has an unexpected shape");
        }
        if (!usable_matrix_type(w->type)) throw type_error(what, w->type);
        if (want_t) {
            if (ggml_tensor * tt = new_transposed(m, w)) deferred.push_back({w, tt});
        }
        if (m.info.wtype < 0 || w->type != GGML_TYPE_F32) m.info.wtype = w->type;
        return w;
    };
    auto vec = [&](ggml_tensor * t, const std::string & what, int64_t n, bool required) -> ggml_tensor * {
        if (!t) {
            if (required) throw empo_error(EMPO_ERR_ARCH, "missing tensor " + what);
            return nullptr;
        }
        if (t->type != GGML_TYPE_F32) throw type_error(what, t->type, "norm weights and biases are read in F32 from llama.cpp's model");
        if (ggml_nelements(t) != n) throw empo_error(EMPO_ERR_ARCH, "tensor " + what + " has an unexpected size");
        return t;
    };
    m.tok_embd = mat(lw.tok_embd, "token_embd.weight", C, V, false);
    m.out_norm = vec(lw.output_norm, "output_norm.weight", C, true);
    m.output.w  = mat(lw.output ? lw.output : lw.tok_embd, "output.weight", C, V, true);
    m.output.wt = m.transposed[m.output.w];
    const int64_t n_in [EMPO_TARGET_COUNT] = { C, C,   C,   C, C, C, F };
    const int64_t n_out[EMPO_TARGET_COUNT] = { C, Dkv, Dkv, C, F, F, C };
    m.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        const empo_llama_layer & S = lw.layers[il];
        empo_layer & L = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = vec(S.attn_norm, p + "attn_norm.weight", C, true);
        L.ffn_norm  = vec(S.ffn_norm,  p + "ffn_norm.weight",  C, true);
        L.bq = vec(S.bq, p + "attn_q.bias", C,   false);
        L.bk = vec(S.bk, p + "attn_k.bias", Dkv, false);
        L.bv = vec(S.bv, p + "attn_v.bias", Dkv, false);
        if (S.bo) throw empo_error(EMPO_ERR_ARCH, "attn_output.bias is not a qwen2 tensor");
        for (int k = 0; k < EMPO_TARGET_COUNT; ++k) {
            const std::string base = p + m.target_tensor[k] + ".weight";
            empo_linear & lin = L.lin[k];
            lin.w  = mat(S.w[k], base, n_in[k], n_out[k], true);
            lin.wt = m.transposed[lin.w];
            if (m.cfg.lora_targets & (1u << k)) add_lora(m, lin, il, k, base, n_in[k], n_out[k]);
        }
    }
    for (ggml_tensor * t : m.params) {
        ggml_tensor * gacc = ggml_dup_tensor(m.ctx_p, t);
        ggml_format_name(gacc, "grad_acc.%s", t->name);
        m.grads.push_back(gacc);
    }
    if (m.params.empty()) throw empo_error(EMPO_ERR_CONFIG, "no LoRA targets selected");
    if (ggml_get_first_tensor(m.ctx_w)) { // stored Wᵀ copies (none with transpose_in_graph on F32/F16)
        m.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_w, ggml_backend_get_default_buffer_type(m.backend));
        if (!m.buf_w) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the transposed weights");
        ggml_backend_buffer_set_usage(m.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    m.opt.init(m.backend, m.params, m.grads);
    std::vector<uint8_t> raw;
    for (auto & d : deferred) { // W's bytes, read from wherever llama.cpp keeps them
        raw.resize(ggml_nbytes(d.first));
        ggml_backend_tensor_get(d.first, raw.data(), 0, raw.size());
        std::vector<uint8_t> tdata = transposed_data(raw, d.first->type, d.first->ne[0], d.first->ne[1], d.second);
        ggml_backend_tensor_set(d.second, tdata.data(), 0, tdata.size());
    }
}

// the device whose buffers hold the shared weights (nullptr: host memory)
static ggml_backend_dev_t shared_device(const empo_llama_weights & lw) {
    ggml_backend_dev_t dev = nullptr;
    auto see = [&](const ggml_tensor * t) {
        if (!t || !t->buffer) return;
        ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
        if (ggml_backend_buft_is_host(buft)) return;
        ggml_backend_dev_t d = ggml_backend_buft_get_device(buft);
        if (!d || ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            // e.g. CPU_REPACK: llama.cpp re-laid the blocks of a quantized
            // matrix for its kernels; their bytes cannot be read back
            throw empo_error(EMPO_ERR_CONFIG, std::string("weight ") + t->name + " is in buffer type " +
                             ggml_backend_buft_name(buft) + ", which the training graph cannot read: use Load(path)");
        }
        if (dev && d != dev) throw empo_error(EMPO_ERR_CONFIG, "the model's weights are split across devices: not supported for training");
        dev = d;
    };
    see(lw.tok_embd);
    see(lw.output);
    for (const auto & L : lw.layers) for (ggml_tensor * w : L.w) see(w);
    return dev;
}

// ---------------------------------------------------------------- AdamW on the backend

void adamw_state::init(ggml_backend_t be, const std::vector<ggml_tensor *> & params, const std::vector<ggml_tensor *> & grads) {
    backend = be;
    p = params;
    g = grads;
    int64_t total = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        ggml_tensor * t = p[i];
        if (t->type != GGML_TYPE_F32 || g[i]->type != GGML_TYPE_F32 || ggml_nelements(g[i]) != ggml_nelements(t) ||
            !(t->flags & GGML_TENSOR_FLAG_PARAM)) {
            throw empo_error(EMPO_ERR_INTERNAL, "AdamW needs F32 param tensors with same-size gradients");
        }
        off.push_back(total);
        total += (ggml_nelements(t) + 15) / 16 * 16;
    }
    const int64_t R = std::max<int64_t>(1, (total + ROW - 1) / ROW);
    ggml_init_params ip = { ggml_tensor_overhead() * 5, nullptr, true };
    ctx = ggml_init(ip);
    if (!ctx) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    P  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ROW, R);
    G  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ROW, R);
    M  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ROW, R);
    V  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ROW, R);
    hp = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 7);
    ggml_set_name(P, "lora_params");
    ggml_set_name(G, "lora_grads");
    ggml_set_name(M, "adam_m");
    ggml_set_name(V, "adam_v");
    ggml_set_name(hp, "adamw_params");
    ggml_set_param(P); // GGML_OP_OPT_STEP_ADAMW asserts it
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(backend);
    const size_t S = ggml_nbytes(P), align = ggml_backend_buft_get_alignment(buft);
    const size_t hp_off = 4 * S;
    size_t size = hp_off + (ggml_nbytes(hp) + align - 1) / align * align + align;
    buf = ggml_backend_buft_alloc_buffer(buft, size);
    if (!buf) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the LoRA parameter buffer");
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    char * base = (char *) ggml_backend_buffer_get_base(buf);
    auto place = [&](ggml_tensor * t, size_t byte_off) {
        if (ggml_backend_tensor_alloc(buf, t, base + byte_off) != GGML_STATUS_SUCCESS) {
            throw empo_error(EMPO_ERR_BACKEND, std::string("cannot place tensor ") + t->name);
        }
    };
    place(P, 0); place(G, S); place(M, 2 * S); place(V, 3 * S); place(hp, hp_off);
    for (size_t i = 0; i < p.size(); ++i) {
        place(p[i], (size_t) off[i] * sizeof(float));
        place(g[i], S + (size_t) off[i] * sizeof(float));
    }
    ggml_backend_buffer_clear(buf, 0);
}

void adamw_state::moment_io(int i, int which, float * dst, const float * src, int64_t n) {
    if (i < 0 || i >= (int) p.size() || (which != 0 && which != 1)) throw empo_error(EMPO_ERR_SHAPE, "moment index out of range");
    if (n != ggml_nelements(p[i])) throw empo_error(EMPO_ERR_SHAPE, "moment size mismatch");
    ggml_tensor * t = which == 0 ? M : V;
    const size_t o = (size_t) off[i] * sizeof(float), nb = (size_t) n * sizeof(float);
    if (src) ggml_backend_tensor_set(t, src, o, nb);
    else     ggml_backend_tensor_get(t, dst, o, nb);
}

// a graph over tensors that live in backend buffers, plus its scratch
// allocation; freed on scope exit
struct small_graph {
    ggml_context * ctx = nullptr;
    ggml_cgraph *  gf = nullptr;
    small_graph(size_t n_nodes) {
        ggml_init_params ip = { ggml_tensor_overhead() * n_nodes + ggml_graph_overhead_custom(n_nodes, false), nullptr, true };
        ctx = ggml_init(ip);
        if (!ctx) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
        gf = ggml_new_graph_custom(ctx, n_nodes, false);
    }
    ~small_graph() {
        if (ctx) ggml_free(ctx);
    }
    void compute(ggml_backend_t be, ggml_gallocr_t & alloc) {
        if (!alloc) alloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
        if (!alloc || !ggml_gallocr_alloc_graph(alloc, gf)) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the optimizer graph");
        if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) throw empo_error(EMPO_ERR_BACKEND, "optimizer graph compute failed");
    }
};

double adamw_state::step(const empo_adamw_params & prm, bool * clipped) {
    if (!(prm.t >= 1) || !std::isfinite(prm.lr) || prm.lr < 0 || !(prm.beta1 >= 0 && prm.beta1 < 1) ||
        !(prm.beta2 >= 0 && prm.beta2 < 1) || !(prm.eps > 0) || !(prm.weight_decay >= 0) || std::isnan(prm.max_norm)) {
        throw empo_error(EMPO_ERR_CONFIG, "invalid AdamW parameters");
    }
    // ---- global gradient norm ‖G‖₂ (padding is zero): row sums of G² on the
    // backend (threads split rows; each row summed in double by ggml-cpu's
    // ggml_vec_sum_f32), the R row sums added in double here
    double norm = 0;
    {
        small_graph sg(16);
        ggml_tensor * rs = ggml_sum_rows(sg.ctx, ggml_sqr(sg.ctx, G));   // [1, R]
        ggml_set_output(rs);
        ggml_build_forward_expand(sg.gf, rs);
        sg.compute(backend, galloc);
        std::vector<float> r(ggml_nelements(rs));
        ggml_backend_tensor_get(rs, r.data(), 0, ggml_nbytes(rs));
        double ss = 0;
        for (float x : r) ss += (double) x;
        norm = std::sqrt(ss);
    }
    if (!std::isfinite(norm)) throw empo_error(EMPO_ERR_NONFINITE, "gradient norm is " + std::to_string(norm));
    double coef = 1.0;
    if (prm.max_norm > 0) coef = prm.max_norm / (norm + 1e-6);
    *clipped = coef < 1.0;
    // ---- hyperparameters of GGML_OP_OPT_STEP_ADAMW (ggml-cpu ops.cpp:
    // keep = 1 − α·wd; m̂ = m·beta1h; v̂ = √(v·beta2h) + ε; θ = θ·keep − α·m̂/v̂)
    const double t = (double) prm.t;
    const float h[7] = {
        (float) prm.lr, (float) prm.beta1, (float) prm.beta2, (float) prm.eps, (float) prm.weight_decay,
        (float) (1.0 / (1.0 - std::pow(prm.beta1, t))), (float) (1.0 / (1.0 - std::pow(prm.beta2, t))),
    };
    ggml_backend_tensor_set(hp, h, 0, sizeof(h));
    small_graph sg(16);
    ggml_tensor * gi = G;
    if (*clipped) gi = ggml_scale_inplace(sg.ctx, G, (float) coef);      // G ← c·G (the accumulators, in place)
    ggml_build_forward_expand(sg.gf, ggml_opt_step_adamw(sg.ctx, P, gi, M, V, hp));
    sg.compute(backend, galloc);
    return norm;
}

// ---------------------------------------------------------------- graph


// y = W·x + s·B·(A·x)   x: [n_in, N] -> [n_out, N]
static ggml_tensor * linear_forward(ggml_context * ctx, const empo_linear & lin, float s, ggml_tensor * x) {
    ggml_tensor * y = ggml_mul_mat(ctx, lin.w, x);           // [n_out, N]
    if (lin.a) {
        ggml_tensor * ax  = ggml_mul_mat(ctx, lin.a, x);     // [r, N]
        ggml_tensor * bax = ggml_mul_mat(ctx, lin.b, ax);    // [n_out, N]
        y = ggml_add(ctx, y, ggml_scale(ctx, bax, s));       // llama.cpp build_lora_mm
    }
    return y;
}

// RMSNorm(x)·w   x: [C, n] -> [C, n]
static ggml_tensor * rms_norm_forward(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

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

// Query rows per attention chunk for a batch of B sequences of T tokens:
// T when one layer's score block [T, T, H·B] F32 fits attn_block (or
// chunking is off), else the most rows whose block [T, Tq, H·B] fits — at
// least 64 and at least T/EMPO_ATTN_MAX_CHUNKS, which bound the nodes per
// layer (a block may then exceed attn_block).
// bytes of one layer's score block [T, rows, H·B] F32
static int64_t attn_block_bytes(const empo_model & m, int B, int T, int64_t rows) {
    return (int64_t) T * rows * m.info.n_head * B * (int64_t) sizeof(float);
}

static int attn_rows(const empo_model & m, int B, int T) {
    const int64_t limit = m.cfg.attn_block;
    const int64_t row   = attn_block_bytes(m, B, T, 1); // one query row, all heads
    if (limit < 0 || row * T <= limit) return T;
    const int64_t fewest = (T + EMPO_ATTN_MAX_CHUNKS - 1) / EMPO_ATTN_MAX_CHUNKS; // at most that many chunks
    return (int) std::min<int64_t>(T, std::max<int64_t>({ 64, fewest, limit / row }));
}

// o = V·softmax(Kᵀ·Q/√D + mask) per head, in query chunks of Tq rows.
//   q [D, T, H*B], k [D, T, Hkv*B], v [T, D, Hkv*B], mask [T, T] -> o [D, T, H*B]
// Tq == T is llama.cpp's own formulation (one [T, T, H*B] block). With
// Tq < T, chunk c computes rows t0..t0+n-1 from a copy of those query rows
// against every key, the future masked by DIAG_MASK_INF(n_past = t0) instead
// of the [T, T] mask input (which would be T² floats itself; mask is then
// null). Each score, softmax row and output element is the same as
// unchunked (x·scale + 0 there, −inf·scale = −inf here), and ACC
// places its [D, n, H*B] output into the result (starting from 0·q, which
// has o's shape since D_v = D; ACC's backward hands each chunk its slice of
// the gradient). Every chunk is recorded in *chunks.
static ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                               float scale, int Tq, std::vector<attn_chunk> * chunks) {
    const int64_t D = q->ne[0], T = q->ne[1], HB = q->ne[2];
    if (Tq >= T) {
        ggml_tensor * kq = ggml_mul_mat(ctx, k, q);                                  // [T(kv), T(q), H*B]
        ggml_tensor * y  = ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f);            // [T, T, H*B]
        ggml_tensor * o  = ggml_mul_mat(ctx, v, y);                                  // [D, T, H*B]
        chunks->push_back({ k, q, mask, 0, y, o, scale });
        return o;
    }
    if (ggml_nbytes(q) > (size_t) INT32_MAX) throw empo_error(EMPO_ERR_TOO_LARGE, "attention output too large to assemble in chunks (ACC offsets are 32-bit)");
    ggml_tensor * o = ggml_scale(ctx, q, 0.0f);                                      // [D, T, H*B] zeros
    for (int64_t t0 = 0; t0 < T; t0 += Tq) {
        const int64_t n = std::min<int64_t>(Tq, T - t0);
        ggml_tensor * qc = ggml_cont(ctx, ggml_view_3d(ctx, q, D, n, HB, q->nb[1], q->nb[2], t0 * q->nb[1])); // [D, n, H*B]
        ggml_tensor * kq = ggml_mul_mat(ctx, k, qc);                                 // [T, n, H*B]
        kq = ggml_diag_mask_inf(ctx, kq, (int) t0);                                  // key s > t0 + row: −inf
        ggml_tensor * y  = ggml_soft_max_ext(ctx, kq, nullptr, scale, 0.0f);         // [T, n, H*B]
        ggml_tensor * oc = ggml_mul_mat(ctx, v, y);                                  // [D, n, H*B]
        o = ggml_acc(ctx, o, oc, o->nb[1], o->nb[2], o->nb[3], t0 * o->nb[1]);       // [D, T, H*B]
        chunks->push_back({ k, qc, nullptr, (int) t0, y, oc, scale });
    }
    return o;
}

// Gradient checkpointing of the attention probabilities. Autograd's backward
// reads each forward softmax y twice — SOFT_MAX_BACK(dy, y) and dV =
// OUT_PROD(y, dO) — so every layer's [T, Tq, H*B] blocks would stay alive
// from the forward to the backward. Instead each chunk gets
// y' = softmax(Kᵀ·Q/√D + mask) rebuilt from the same forward nodes (K, Q and
// the mask stay alive for the backward anyway: the gradients of Kᵀ·Q read
// them), and every backward use of y reads y'. y' is computed right after
// the chunk's output gradient dO exists: the recompute's first node gets dO
// as an extra source in its last, unused slot (the ordering edge of
// in_graph_transposed; MUL_MAT reads src[0], src[1] only), so ggml-alloc
// frees y' after that chunk's backward and y after the forward's V·y. The
// same ops on the same inputs give y' == y bit for bit. fwd: the nodes of
// the forward (their uses of y are left alone). Returns the y' made, one per
// chunk that a gradient reaches.
static std::vector<ggml_tensor *> recompute_attention(ggml_context * ctx, ggml_cgraph * gf, const std::vector<attn_chunk> & chunks,
                                                      const std::unordered_set<const ggml_tensor *> & fwd) {
    std::unordered_map<const ggml_tensor *, ggml_tensor *> redo;
    std::vector<ggml_tensor *> redone;
    for (const attn_chunk & c : chunks) {
        ggml_tensor * d_o = ggml_graph_get_grad(gf, c.o);
        if (!d_o) continue;                                                          // no gradient reaches this layer
        ggml_tensor * kq = ggml_mul_mat(ctx, c.k, c.q);                              // [T, Tq, H*B]
        kq->src[GGML_MAX_SRC - 1] = d_o;                                             // ordering edge: after dO
        if (!c.mask) kq = ggml_diag_mask_inf(ctx, kq, c.t0);
        ggml_tensor * y2 = ggml_soft_max_ext(ctx, kq, c.mask, c.scale, 0.0f);        // y'
        redo[c.y] = y2;
        redone.push_back(y2);
    }
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * t = ggml_graph_node(gf, i);
        if (fwd.count(t)) continue;
        for (int j = 0; j < GGML_MAX_SRC; ++j) {
            auto it = t->src[j] ? redo.find(t->src[j]) : redo.end();
            if (it != redo.end()) t->src[j] = it->second;
        }
    }
    return redone;
}

// Forward to logp [1, M] and entropy [1, M]; the attention in query chunks
// of Tq rows (attention()), each recorded in *chunks.
static void build_forward(empo_model & m, ggml_context * ctx, int B, int T, int M, int Tq, graph_inputs & in,
                          std::vector<attn_chunk> * chunks, ggml_tensor ** out_logp, ggml_tensor ** out_ent) {
    const empo_model_info & hp = m.info;
    const int64_t C = hp.n_embd, D = hp.n_embd_head, H = hp.n_head, Hkv = hp.n_head_kv, V = hp.n_vocab;
    const int64_t N = (int64_t) B * T;
    const float   eps = hp.norm_eps, s = m.lora_scale;

    in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N);  ggml_set_input(in.tokens);
    in.pos    = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N);  ggml_set_input(in.pos);
    in.mask   = nullptr;
    if (Tq >= T) { in.mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, T, T); ggml_set_input(in.mask); } // chunked: DIAG_MASK_INF
    in.rows   = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, M);  ggml_set_input(in.rows);
    in.tidx   = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, M); ggml_set_input(in.tidx);

    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, in.tokens);                 // [C, N]
    for (int il = 0; il < hp.n_layer; ++il) {
        const empo_layer & L = m.layers[il];
        // ---- attention
        ggml_tensor * h = rms_norm_forward(ctx, x, L.attn_norm, eps);           // [C, N]
        ggml_tensor * q = linear_forward(ctx, L.lin[EMPO_TARGET_Q], s, h);      // [C, N]
        ggml_tensor * k = linear_forward(ctx, L.lin[EMPO_TARGET_K], s, h);      // [D*Hkv, N]
        ggml_tensor * v = linear_forward(ctx, L.lin[EMPO_TARGET_V], s, h);      // [D*Hkv, N]
        if (L.bq) q = ggml_add(ctx, q, L.bq);
        if (L.bk) k = ggml_add(ctx, k, L.bk);
        if (L.bv) v = ggml_add(ctx, v, L.bv);
        q = ggml_reshape_3d(ctx, q, D, H,   N);                                  // [D, H, N]
        k = ggml_reshape_3d(ctx, k, D, Hkv, N);                                  // [D, Hkv, N]
        q = ggml_rope_ext(ctx, q, in.pos, nullptr, (int) D, GGML_ROPE_TYPE_NEOX, hp.n_ctx,
                          hp.rope_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k = ggml_rope_ext(ctx, k, in.pos, nullptr, (int) D, GGML_ROPE_TYPE_NEOX, hp.n_ctx,
                          hp.rope_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        // heads × sequences folded into dim 2 so GQA broadcasting (head h uses kv head h/G)
        // works in mul_mat and in its backward (which needs ne3 == 1)
        q = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, q, D, H, T, B), 0, 2, 1, 3));     // [D, T, H, B]
        q = ggml_reshape_3d(ctx, q, D, T, H * B);                                                    // [D, T, H*B]
        k = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, k, D, Hkv, T, B), 0, 2, 1, 3));   // [D, T, Hkv, B]
        k = ggml_reshape_3d(ctx, k, D, T, Hkv * B);                                                  // [D, T, Hkv*B]
        v = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, v, D, Hkv, T, B), 1, 2, 0, 3));   // [T, D, Hkv, B]
        v = ggml_reshape_3d(ctx, v, T, D, Hkv * B);                                                  // [T, D, Hkv*B]
        ggml_tensor * o = attention(ctx, q, k, v, in.mask, 1.0f / sqrtf((float) D), Tq, chunks); // [D, T, H*B]
        o = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, o, D, T, H, B), 0, 2, 1, 3));     // [D, H, T, B]
        o = ggml_reshape_2d(ctx, o, C, N);                                       // [C, N]
        o = linear_forward(ctx, L.lin[EMPO_TARGET_O], s, o);                     // [C, N]
        x = ggml_add(ctx, x, o);                                                 // [C, N]
        // ---- SwiGLU MLP
        h = rms_norm_forward(ctx, x, L.ffn_norm, eps);                           // [C, N]
        ggml_tensor * gt = linear_forward(ctx, L.lin[EMPO_TARGET_GATE], s, h);   // [F, N]
        ggml_tensor * up = linear_forward(ctx, L.lin[EMPO_TARGET_UP],   s, h);   // [F, N]
        ggml_tensor * a  = ggml_swiglu_split(ctx, gt, up);                       // [F, N] silu(gate)·up
        x = ggml_add(ctx, x, linear_forward(ctx, L.lin[EMPO_TARGET_DOWN], s, a)); // [C, N]
    }
    // ---- head: logits only for the M trained positions
    ggml_tensor * hs = ggml_get_rows(ctx, x, in.rows);                           // [C, M]
    hs = rms_norm_forward(ctx, hs, m.out_norm, eps);                             // [C, M]
    ggml_tensor * z = ggml_mul_mat(ctx, m.output.w, hs);                         // [V, M]
    // ---- log-softmax without underflow (see header comment)
    ggml_tensor * p    = ggml_soft_max(ctx, z);                                  // [V, M]
    ggml_tensor * mu   = ggml_sum_rows(ctx, ggml_mul(ctx, p, z));                // [1, M] E_p[z]
    ggml_tensor * e    = ggml_exp(ctx, ggml_add(ctx, z, ggml_scale(ctx, mu, -1.0f))); // [V, M] exp(z − m)
    ggml_tensor * logS = ggml_log(ctx, ggml_sum_rows(ctx, e));                   // [1, M] = entropy
    ggml_tensor * lse  = ggml_add(ctx, mu, logS);                                // [1, M]
    // z[target] as Σ_v z ⊙ onehot, not a GET_ROWS of z viewed as [1, V*M]: that
    // gather's backward (GET_ROWS_BACK) launches one CUDA block row per source
    // row, V·M of them, over the 65,535 a grid allows for any real vocabulary
    // ("invalid argument", measured on an H200), each looping over all M
    // indices. The one-hot is built from nodes autograd never differentiates
    // (STEP's source is ignored, so FILL and SET_ROWS need no backward); the
    // sum adds one z·1 to exact zeros, the value GET_ROWS gave, and its
    // backward is one dense MUL. Costs one more [V, M] tensor, alive until the
    // head's backward.
    ggml_tensor * zero = ggml_fill_inplace(ctx, ggml_step(ctx, z), 0.0f);       // [V, M] zeros, no gradient
    ggml_tensor * one  = ggml_fill_inplace(ctx, ggml_step(ctx, mu), 1.0f);      // [1, M] ones, no gradient
    ggml_tensor * hot  = ggml_set_rows(ctx, ggml_reshape_3d(ctx, zero, 1, V, M),
                                       ggml_reshape_3d(ctx, one, 1, 1, M), in.tidx); // [1, V, M]: 1 at (target_j, j)
    ggml_tensor * zt   = ggml_sum_rows(ctx, ggml_mul(ctx, z, ggml_reshape_2d(ctx, hot, V, M))); // [1, M] z[target]
    ggml_tensor * logp = ggml_sub(ctx, zt, lse);                                 // [1, M]
    ggml_set_name(logp, "logp");
    ggml_set_name(logS, "entropy");
    ggml_set_output(logp);
    ggml_set_output(logS);
    *out_logp = logp;
    *out_ent  = logS;
}

// Wᵀ [n_out, n_in] of a frozen matrix w [n_in, n_out] made inside a graph,
// with the values and type of the stored copy (transposed_data): a copy of
// transpose(w) for F32/F16/BF16; for a quantized w, its rows dequantized to
// F32 (CPY quantized → F32 runs the type's to_float row by row, as to_f32
// does) and copied transposed into F16 (the same round-to-nearest
// conversion). The copies are transient — 4 + 2 bytes per element for a
// quantized matrix: 0.41 GB for a 7B FFN matrix, 3.3 GB for its untied
// output head, the largest — and only one matrix's copies may be alive at a
// time, which takes two things of ggml's graph and allocator:
//  - every copy is a graph node (ggml_cast, ggml_cont), never a CPY into a
//    destination tensor of its own: such a destination is a leaf, and
//    ggml-alloc allocates all leafs of a graph before its first node
//    (ggml_gallocr_alloc_graph_impl), so the destinations of every matrix
//    would be allocated at once for the whole graph;
//  - the first copy gets `dy` (the gradient that Wᵀ multiplies) as an extra
//    source in its last, unused src slot. The graph is ordered by a DFS over
//    the sources (ggml_visit_parents, src[0] first), so MUL_MAT(Wᵀ, dY)
//    visits the copies (which depend on the leaf w only) before dY's chain.
//    Autograd sums the residual stream's gradient with the upper layers'
//    part as src[0], so most chains are short and the copies land next to
//    their MUL_MAT anyway, but not all: the output head's copy was made
//    before the head's softmax backward (measured on a 6-layer model). With
//    the edge every copy runs after dY, right before its MUL_MAT, and
//    ggml-alloc frees it there. The edge costs nothing: CPY and CONT read
//    src[0] only, and dY is alive until the MUL_MAT anyway.
static ggml_tensor * in_graph_transposed(ggml_context * ctx, ggml_tensor * w, ggml_tensor * dy) {
    ggml_tensor * first = nullptr, * wt = nullptr;
    if (!ggml_is_quantized(w->type)) {
        first = wt = ggml_cont(ctx, ggml_transpose(ctx, w));                             // [n_out, n_in]
    } else {
        first = ggml_cast(ctx, w, GGML_TYPE_F32);                                        // [n_in, n_out]
        wt    = ggml_cast(ctx, ggml_transpose(ctx, first), transposed_type(w->type));   // [n_out, n_in]
    }
    if (first->src[GGML_MAX_SRC - 1]) throw empo_error(EMPO_ERR_INTERNAL, "in-graph Wᵀ: no free source slot for the ordering edge");
    first->src[GGML_MAX_SRC - 1] = dy;
    return wt;
}

// Replace autograd's dX = OUT_PROD(W, dYᵀ) through frozen W by MUL_MAT(Wᵀ, dY).
static int rewrite_frozen_backward(empo_model & m, ggml_context * ctx, ggml_cgraph * gb) {
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gb); ++i) {
        ggml_tensor * t = ggml_graph_node(gb, i);
        if (t->op != GGML_OP_OUT_PROD) continue;
        auto it = m.transposed.find(t->src[0]);
        if (it == m.transposed.end()) continue;
        ggml_tensor * dyT = t->src[1];                        // transpose(dY): [N, n_out]
        if (dyT->op != GGML_OP_TRANSPOSE) continue;
        ggml_tensor * dy = dyT->src[0];                       // [n_out, N]
        ggml_tensor * w  = t->src[0];                         // [n_in, n_out]
        if (!ggml_is_contiguous(dy) || dy->ne[0] != w->ne[1] || t->ne[0] != w->ne[0] || t->ne[1] != dy->ne[1] ||
            dy->ne[2] != 1 || dy->ne[3] != 1 || t->type != GGML_TYPE_F32) {
            continue;
        }
        ggml_tensor * wt = it->second;                        // [n_out, n_in]
        if (!wt) wt = in_graph_transposed(ctx, w, dy);        // transient copy, made after dY, freed after use
        t->op     = GGML_OP_MUL_MAT;                          // t: [n_in, N] = Wᵀ·dY
        t->src[0] = wt;
        t->src[1] = dy;
        memset(t->op_params, 0, sizeof(t->op_params));
        ++n;
    }
    return n;
}

// The remaining 2-D OUT_PROD nodes of the backward become MUL_MATs. Measured
// with empo_model_profile (100M model, 1 thread): before this rewrite they
// took ~30% of a CPU training step for a few % of its FLOPs (the CPU OUT_PROD
// is a loop of row-wise multiply-adds).
// In ggml ne order, OUT_PROD(a, b) [a.ne0, b.ne0] contracts ne1 of both,
// r[i,j] = Σ_k a[i,k]·b[j,k], while MUL_MAT(X, Y) [X.ne1, Y.ne1] contracts
// ne0 of both, r[i,j] = Σ_k X[k,i]·Y[k,j]. Hence
//   OUT_PROD(a, b) = MUL_MAT(cont(transpose(a)), cont(transpose(b))),
// and when b is itself transpose(dy) the second operand is dy (no copy).
// Applied where a.ne0 is the LoRA rank: the LoRA
// gradient dB = OUT_PROD(A·x, dY) (one copy of dY transposed) and dX through
// B, OUT_PROD(B, transpose(dY)) (B changes every step, so Bᵀ, r·n floats, is
// made in the graph); and, in 3-D with GQA broadcasting over ne2 (the same
// index map in OUT_PROD and MUL_MAT), where a.ne0 is the head dim D: the
// attention's dQ = OUT_PROD(K, dKQᵀ) and dK = OUT_PROD(Q, dKQ) (T² per head
// copied for the latter). With a long a.ne0 (dA = OUT_PROD(x, d(A·x)), dX
// through A) ggml's OUT_PROD is efficient and the transposed copy of the
// activation x would cost more than it saves (measured).
static int rewrite_out_prods(const empo_model & m, ggml_context * ctx, ggml_cgraph * gb) {
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gb); ++i) {
        ggml_tensor * t = ggml_graph_node(gb, i);
        if (t->op != GGML_OP_OUT_PROD || t->type != GGML_TYPE_F32) continue;
        ggml_tensor * a = t->src[0], * b = t->src[1];
        if (!a || !b || a->type != GGML_TYPE_F32 || b->type != GGML_TYPE_F32) continue;
        // shapes: a [m, K, A2], b [n, K, B2], t [m, n, B2], a broadcast over
        // ne2 as in both ops (i_a2 = i2 / (B2/A2)); no ne3
        if (a->ne[3] != 1 || b->ne[3] != 1 || t->ne[3] != 1 || a->ne[1] != b->ne[1] || t->ne[0] != a->ne[0] ||
            t->ne[1] != b->ne[0] || t->ne[2] != b->ne[2] || b->ne[2] % a->ne[2] != 0) continue;
        // ggml-cpu's OUT_PROD does b.ne0·K multiply-adds of length a.ne0: fine
        // for a long a.ne0 (dA = OUT_PROD(x, d), dX through A, dV and d(KQ)
        // over T keys), overhead-bound when a.ne0 is the LoRA rank (dB, dX
        // through B) or the head dim (dQ = OUT_PROD(K, dKQᵀ), dK = OUT_PROD(Q, dKQ))
        const bool rank = !m.cfg.full && a->ne[2] == 1 && b->ne[2] == 1 && a->ne[0] == m.cfg.lora_rank;
        const bool head = b->ne[2] > 1 && a->ne[0] == m.info.n_embd_head;
        if (!rank && !head) continue;
        ggml_tensor * X = ggml_cont(ctx, ggml_transpose(ctx, a));                  // [K, m, A2]
        ggml_tensor * Y = (b->op == GGML_OP_TRANSPOSE && ggml_is_contiguous(b->src[0])) ? b->src[0]   // [K, n, B2]
                                                                                    : ggml_cont(ctx, ggml_transpose(ctx, b));
        t->op     = GGML_OP_MUL_MAT;
        t->src[0] = X;
        t->src[1] = Y;
        memset(t->op_params, 0, sizeof(t->op_params));
        ++n;
    }
    return n;
}

// ggml-alloc may compute an in-place-capable op into the memory of a parent
// that has no other pending child. RMS_NORM_BACK(dz, x) (CPU, per row: sums
// over x·dz and x·x first, then dx := x; dx *= k; dx += dz) is wrong when dx
// aliases dz (measured: gradients through every RMSNorm were garbage) and
// right when it aliases x; SOFT_MAX_BACK(dy, y) (dot(y, dy) first, then
// dx := dy; dx -= dot; dx *= y) is wrong when dx aliases y and right when it
// aliases dy. Pin the one operand that must not be overwritten (dz, y) with
// a zero-cost view in an unused src slot: a parent with a live view is never
// reused in place (ggml_gallocr_allocate_node, which ggml_backend_sched uses
// for its compute buffers too), and the view dies with the node. The other
// operand may be reused: for SOFT_MAX_BACK that saves one [T, T, H·B]
// attention-sized buffer at the backward's peak.
static int pin_backward_operands(ggml_context * ctx, ggml_cgraph * g) {
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(g); ++i) {
        ggml_tensor * t = ggml_graph_node(g, i);
        int j = -1;
        if (t->op == GGML_OP_RMS_NORM_BACK) j = 0;      // dz
        if (t->op == GGML_OP_SOFT_MAX_BACK) j = 1;      // y
        if (j < 0) continue;
        ggml_tensor * src = t->src[j];
        const int slot = GGML_MAX_SRC - 1;
        if (!src || t->src[slot]) continue;
        t->src[slot] = ggml_view_1d(ctx, src, 1, 0);
        ++n;
    }
    return n;
}

static void set_inputs(empo_model & m, const empo_batch & b) {
    const int T = b.T, M = b.M;
    const int64_t N = (int64_t) b.B * T;
    ggml_tensor * tokens = m.in.tokens, * pos = m.in.pos, * mask = m.in.mask, * rows = m.in.rows, * tidx = m.in.tidx;
    if (!tokens->buffer || !pos->buffer || (mask && !mask->buffer) || !rows->buffer || !tidx->buffer) {
        throw empo_error(EMPO_ERR_INTERNAL, "graph inputs not allocated");
    }
    ggml_backend_tensor_set(tokens, b.tokens, 0, N * sizeof(int32_t));
    ggml_backend_tensor_set(pos,    b.pos,    0, N * sizeof(int32_t));
    if (mask) { // unchunked attention (chunks mask with DIAG_MASK_INF)
        std::vector<float> mk((size_t) T * T);
        for (int t = 0; t < T; ++t) {          // query row t
            for (int s = 0; s < T; ++s) {      // key column s
                mk[(size_t) t * T + s] = s <= t ? 0.0f : -INFINITY;
            }
        }
        ggml_backend_tensor_set(mask, mk.data(), 0, mk.size() * sizeof(float));
    }
    ggml_backend_tensor_set(rows, b.rows, 0, M * sizeof(int32_t));
    ggml_backend_tensor_set(tidx, b.targets, 0, M * sizeof(int32_t));
}

// nodes (and leafs) of one graph whose attention runs in `chunks` query
// chunks per layer (≈ 40 nodes per chunk: forward, recompute, backward);
// the scheduler's hash set is 4× the largest (EMPO_ATTN_MAX_CHUNKS, or 1
// with chunking off)
static size_t graph_size(const empo_model & m, int chunks) {
    return 4096 + (size_t) m.info.n_layer * (1024 + 40 * (size_t) std::max(chunks, 1));
}

static int max_attn_chunks(const empo_model & m) {
    return m.cfg.attn_block < 0 ? 1 : EMPO_ATTN_MAX_CHUNKS;
}

static void drop_graph(empo_model & m) {
    if (m.ctx_c) ggml_free(m.ctx_c);
    m.ctx_c = nullptr;
    m.graph = nullptr;
    if (m.buf_coef) ggml_backend_buffer_free(m.buf_coef);
    m.buf_coef = nullptr;
    if (m.ctx_coef) ggml_free(m.ctx_coef);
    m.ctx_coef = nullptr;
    m.t_logp = m.t_ent = m.t_clogp = m.t_cent = m.t_lgrad = nullptr;
    m.cb_node = nullptr;
    m.cb_fn   = nullptr;
    m.cb_user = nullptr;
}

// ggml_backend_sched eval callback (user_data = the model). Asks for the
// last forward node only; when it has been computed (all nodes before it
// too: splits keep the graph's node order), reads logp/ent, calls the
// caller's coefficient function and writes c_logp/c_ent into the primary
// device's buffer before the scheduler computes the backward nodes.
// Never throws (called from inside ggml).
static void prof_record(empo_model & m, ggml_tensor * t) {
    const int64_t now = ggml_time_us();
    const bool fwd = m.prof_fwd.count(t) > 0;
    std::string key = std::string(fwd ? "fwd " : "bwd ") + ggml_op_desc(t);
    if ((t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_OUT_PROD) && t->src[0]) {
        const char * n = t->src[0]->name;
        const size_t L = strlen(n);
        const bool frozen_t = L > 2 && strcmp(n + L - 2, ".T") == 0;
        const bool lora = strstr(n, ".lora_") != nullptr;
        key += std::string("[") + ggml_type_name(t->src[0]->type) + (frozen_t ? " Wᵀ" : lora ? " LoRA" : "") + "]";
    }
    auto & e = m.prof[key];
    e.first  += now - m.prof_last_us;
    e.second += 1;
    m.prof_last_us = now;
}

static bool is_view_op(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE;
}

// empties the capture (its settings stay)
static void cap_clear(empo_model & m) {
    m.cap_index.clear();
    m.cap_info.clear();
    m.cap_data.clear();
    m.cap_bytes = 0;
    m.cap_err.clear();
}

// copies node t (just computed) into the capture; never throws
static void cap_record(empo_model & m, ggml_tensor * t) {
    try {
        auto it = m.cap_index.find(t);
        if (it == m.cap_index.end()) return; // not a node of the graph (a scheduler copy)
        empo_node_info ni{};
        ni.index    = it->second;
        ni.backward = it->second >= m.n_fwd ? 1 : 0;
        ni.type     = (int32_t) t->type;
        for (int d = 0; d < 4; ++d) ni.ne[d] = t->ne[d];
        snprintf(ni.name, sizeof(ni.name), "%s", t->name);
        snprintf(ni.op, sizeof(ni.op), "%s", ggml_op_desc(t));
        ggml_backend_t be = ggml_backend_sched_get_tensor_backend(m.sched, t);
        snprintf(ni.backend, sizeof(ni.backend), "%s", be ? ggml_backend_name(be) : "");
        for (int j = 0; j < GGML_MAX_SRC; ++j) {
            if (!t->src[j]) continue;
            if (ni.n_src < EMPO_NODE_SRCS) snprintf(ni.src[ni.n_src], sizeof(ni.src[0]), "%s", t->src[j]->name);
            ++ni.n_src;
        }
        std::vector<float> v;
        const int64_t n = ggml_nelements(t);
        if (!is_view_op(t->op) && ggml_is_contiguous(t) && (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16) &&
            m.cap_bytes + n * (int64_t) sizeof(float) <= m.cap_max_bytes) {
            v.resize((size_t) n);
            if (t->type == GGML_TYPE_F32) {
                ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
            } else {
                std::vector<ggml_fp16_t> h((size_t) n);
                ggml_backend_tensor_get(t, h.data(), 0, ggml_nbytes(t));
                ggml_fp16_to_fp32_row(h.data(), v.data(), n);
            }
            ni.n = n;
            m.cap_bytes += n * (int64_t) sizeof(float);
        }
        m.cap_info.push_back(ni);
        m.cap_data.push_back(std::move(v));
    } catch (const std::exception & e) {
        if (m.cap_err.empty()) m.cap_err = e.what();
    } catch (...) {
        if (m.cap_err.empty()) m.cap_err = "unknown exception while capturing a node";
    }
}

static bool sched_eval_cb(ggml_tensor * t, bool ask, void * user_data) {
    empo_model & m = *(empo_model *) user_data;
    if (m.prof_on || m.cap_on) {
        if (ask) return true;
        if (m.prof_on) prof_record(m, t);
        if (m.cap_on) cap_record(m, t);
        if (!m.cb_node || t != m.cb_node) return true;
    }
    if (!m.cb_node) return false;          // forward-only graph: nothing to observe
    if (ask) return t == m.cb_node;
    if (t != m.cb_node || m.cb_done || m.cb_failed) return true;
    try {
        const size_t n = (size_t) m.M;
        std::vector<float> lp(n), en(n), cl(n, 0.0f), ce(n, 0.0f);
        ggml_backend_tensor_get(m.t_logp, lp.data(), 0, n * sizeof(float));
        ggml_backend_tensor_get(m.t_ent,  en.data(), 0, n * sizeof(float));
        m.cb_status = m.cb_fn(m.cb_user, m.M, lp.data(), en.data(), cl.data(), ce.data());
        if (m.cb_status != 0) {
            m.cb_failed = true;
            m.cb_err = "the coefficient callback returned " + std::to_string(m.cb_status);
            return true;               // the scheduler goes on; the caller restores the gradients
        }
        ggml_backend_tensor_set(m.t_clogp, cl.data(), 0, n * sizeof(float));
        ggml_backend_tensor_set(m.t_cent,  ce.data(), 0, n * sizeof(float));
        m.cb_done = true;
    } catch (const std::exception & e) {
        m.cb_failed = true;
        m.cb_err = e.what();
    } catch (...) {
        m.cb_failed = true;
        m.cb_err = "unknown exception in the eval callback";
    }
    return true;
}

// the scheduler over the model's backends: [primary, CPU] (or [CPU])
static ggml_backend_sched_t new_sched(empo_model & m) {
    ggml_backend_t backends[2] = { m.backend, m.backend_cpu };
    const int n_backends = m.backend_cpu ? 2 : 1;
    // graph_size sizes the scheduler's hash set: nodes + leafs + split copies
    ggml_backend_sched_t s = ggml_backend_sched_new(backends, nullptr, n_backends, graph_size(m, max_attn_chunks(m)) * 4, false, false);
    if (!s) throw empo_error(EMPO_ERR_BACKEND, "cannot create the backend scheduler");
    return s;
}

// bytes of the compute buffers the scheduler holds now
static int64_t sched_alloc_bytes(const empo_model & m) {
    if (!m.sched) return 0;
    int64_t n = (int64_t) ggml_backend_sched_get_buffer_size(m.sched, m.backend);
    if (m.backend_cpu) n += (int64_t) ggml_backend_sched_get_buffer_size(m.sched, m.backend_cpu);
    return n;
}

// free the compute buffers (a new scheduler allocates them again on the next graph)
static void release_compute(empo_model & m) {
    ggml_backend_sched_free(m.sched);
    m.sched = nullptr;
    m.sched = new_sched(m);
    ggml_backend_sched_set_eval_callback(m.sched, sched_eval_cb, &m);
}

static void check_batch(const empo_model & m, const empo_batch & b) {
    const int B = b.B, T = b.T, M = b.M;
    const int64_t N = (int64_t) B * T, V = m.info.n_vocab;
    // shape validation (the Go side validates too; keep C safe on its own)
    if (B < 1 || T < 1 || M < 1 || T > m.info.n_ctx || N > (int64_t) INT32_MAX / 4 || (int64_t) M * V >= (int64_t) INT32_MAX) {
        throw empo_error(EMPO_ERR_SHAPE, "bad batch shape");
    }
    for (int64_t i = 0; i < N; ++i) {
        if (b.tokens[i] < 0 || b.tokens[i] >= V) throw empo_error(EMPO_ERR_SHAPE, "token id out of range");
        if (b.pos[i] < 0 || b.pos[i] >= m.info.n_ctx) throw empo_error(EMPO_ERR_SHAPE, "position out of range");
    }
    for (int j = 0; j < M; ++j) {
        if (b.rows[j] < 0 || b.rows[j] >= N) throw empo_error(EMPO_ERR_SHAPE, "row out of range");
        if (b.targets[j] < 0 || b.targets[j] >= V) throw empo_error(EMPO_ERR_SHAPE, "target out of range");
    }
}

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

static ggml_tensor * view_root(ggml_tensor * t) {
    while (t && is_view_op(t->op) && t->op != GGML_OP_NONE && t->src[0]) t = t->src[0];
    return t;
}

// the reducers of each recomputed chunk (before the rewrites: autograd's
// nodes, whose identity the rewrites keep)
static attn_reducers find_attn_reducers(ggml_cgraph * gf, const std::vector<ggml_tensor *> & redone,
                                        const std::unordered_set<const ggml_tensor *> & fwd) {
    attn_reducers r;
    r.of.resize(redone.size());
    r.first.assign(redone.size(), INT32_MAX);
    std::unordered_map<const ggml_tensor *, int> big; // chunk-sized tensors -> chunk
    for (size_t c = 0; c < redone.size(); ++c) big[redone[c]] = (int) c;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {            // topological order
        ggml_tensor * t = ggml_graph_node(gf, i);
        if (fwd.count(t) || is_view_op(t->op)) continue;
        int c = -1;
        for (int j = 0; j < GGML_MAX_SRC && c < 0; ++j) {
            auto it = t->src[j] ? big.find(view_root(t->src[j])) : big.end();
            if (it != big.end()) c = it->second;
        }
        if (c < 0) continue;
        if (t->op == GGML_OP_SOFT_MAX_BACK || t->op == GGML_OP_DIAG_MASK_ZERO || t->op == GGML_OP_DIAG_MASK_INF) {
            big[t] = c; // dS, and dS with the future zeroed (DIAG_MASK_INF's backward): chunk-sized too
            continue;
        }
        r.of[c].push_back(t);
        r.first[c] = std::min(r.first[c], i);
    }
    return r;
}

// Adds the attention backward to gb chunk by chunk (see attn_reducers),
// after every rewrite and before the rest of the backward. gf: autograd's
// graph (its nodes' consumers).
static void order_attn_backward(ggml_cgraph * gb, ggml_cgraph * gf, const attn_reducers & r) {
    std::unordered_map<const ggml_tensor *, std::vector<ggml_tensor *>> users;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * t = ggml_graph_node(gf, i);
        for (int j = 0; j < GGML_MAX_SRC; ++j) if (t->src[j]) users[t->src[j]].push_back(t);
    }
    std::vector<int> order;
    for (size_t c = 0; c < r.of.size(); ++c) if (!r.of[c].empty()) order.push_back((int) c);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return r.first[a] < r.first[b]; });
    for (int c : order) {
        for (ggml_tensor * t : r.of[c]) ggml_build_forward_expand(gb, t);
        for (ggml_tensor * t : r.of[c]) {
            // follow the contribution (views, REPEAT_BACK, CONT, ...) to the
            // chain node that adds it (src[1] of an ADD / ACC); the chain's
            // first contribution is src[0] of the next chunk's, added then
            ggml_tensor * cur = t;
            for (int hop = 0; hop < 16; ++hop) {
                auto it = users.find(cur);
                if (it == users.end() || it->second.size() != 1) break;
                ggml_tensor * nx = it->second[0];
                if (nx->op == GGML_OP_ADD || nx->op == GGML_OP_ACC) {
                    if (nx->src[1] == cur) cur = nx;
                    break;
                }
                cur = nx;
            }
            ggml_build_forward_expand(gb, cur);
        }
    }
}

// Builds m.graph for batch b: the forward (logp, ent) or, with_backward, the
// training graph (forward, the surrogate loss with the coefficient tensors,
// autograd's backward with the rewrites and pins). *mul_lp / *mul_en: the
// MULs that read the coefficients (training only).
static void build_graph(empo_model & m, const empo_batch & b, bool with_backward,
                        ggml_tensor ** mul_lp_out, ggml_tensor ** mul_en_out) {
    drop_graph(m);
    const int B = b.B, T = b.T, M = b.M;
    const int Tq = attn_rows(m, B, T);
    m.attn_chunks = (T + Tq - 1) / Tq;
    const size_t gsize = graph_size(m, m.attn_chunks);
    ggml_init_params ip = { ggml_tensor_overhead() * gsize * 2 + ggml_graph_overhead_custom(gsize, true) * 2, nullptr, true };
    m.ctx_c = ggml_init(ip);
    if (!m.ctx_c) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
    ggml_context * ctx = m.ctx_c;

    graph_inputs in{};
    ggml_tensor *lp = nullptr, *en = nullptr;
    std::vector<attn_chunk> chunks;
    m.attn_recomputed = 0;
    build_forward(m, ctx, B, T, M, Tq, in, &chunks, &lp, &en);
    m.in = in;
    ggml_set_name(in.tokens, "in_tokens");
    ggml_set_name(in.pos,    "in_pos");
    if (in.mask) ggml_set_name(in.mask, "in_mask");
    ggml_set_name(in.rows,   "in_rows");
    ggml_set_name(in.tidx,   "in_tidx");
    m.M = M;
    m.t_logp = lp;
    m.t_ent  = en;

    ggml_cgraph * gb = ggml_new_graph_custom(ctx, gsize, false); // the graph that is computed
    ggml_build_forward_expand(gb, lp);
    ggml_build_forward_expand(gb, en);
    m.n_fwd = ggml_graph_n_nodes(gb);
    if (m.n_fwd < 1) throw empo_error(EMPO_ERR_INTERNAL, "empty forward graph");

    ggml_tensor * mul_lp = nullptr, * mul_en = nullptr;
    if (with_backward) {
        // ---- the surrogate L' = Σ_j c_logp[j]·logp[j] + c_ent[j]·H[j]; ∂L'/∂θ = ∂L/∂θ
        // c_logp, c_ent: [1, M] in a buffer of the primary device, written by
        // the eval callback mid-compute (not graph inputs: the scheduler
        // copies inputs at the start of a split, before the callback ran)
        ggml_init_params cp = { ggml_tensor_overhead() * 2, nullptr, true };
        m.ctx_coef = ggml_init(cp);
        if (!m.ctx_coef) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
        m.t_clogp = ggml_new_tensor_2d(m.ctx_coef, GGML_TYPE_F32, 1, M);
        m.t_cent  = ggml_new_tensor_2d(m.ctx_coef, GGML_TYPE_F32, 1, M);
        ggml_set_name(m.t_clogp, "coef_logp");
        ggml_set_name(m.t_cent,  "coef_ent");
        m.buf_coef = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_coef, ggml_backend_get_default_buffer_type(m.backend));
        if (!m.buf_coef) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the coefficient buffer");
        ggml_backend_buffer_clear(m.buf_coef, 0);
        mul_lp = ggml_mul(ctx, lp, m.t_clogp);
        mul_en = ggml_mul(ctx, en, m.t_cent);
        ggml_tensor * loss = ggml_add(ctx, ggml_sum(ctx, mul_lp), ggml_sum(ctx, mul_en));   // [1]
        ggml_set_name(loss, "surrogate");
        ggml_set_output(loss);
        ggml_set_loss(loss);

        // autograd on a scratch graph gf; params get persistent accumulators so
        // gradients add across calls until empo_model_grad_zero
        ggml_cgraph * gf = ggml_new_graph_custom(ctx, gsize, true);
        ggml_build_forward_expand(gf, lp);
        ggml_build_forward_expand(gf, en);
        ggml_build_forward_expand(gf, loss);
        std::unordered_set<const ggml_tensor *> fwd_nodes;
        for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) fwd_nodes.insert(ggml_graph_node(gf, i));
        std::unordered_map<const ggml_tensor *, ggml_tensor *> acc;
        for (size_t i = 0; i < m.params.size(); ++i) acc[m.params[i]] = m.grads[i];
        std::vector<ggml_tensor *> grad_accs(ggml_graph_n_nodes(gf), nullptr);
        for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
            auto it = acc.find(ggml_graph_node(gf, i));
            if (it != acc.end()) grad_accs[i] = it->second;
        }
        ggml_build_backward_expand(ctx, gf, grad_accs.data());
        m.t_lgrad = ggml_graph_get_grad_acc(gf, loss); // [1], seeded with 1
        if (!m.t_lgrad) throw empo_error(EMPO_ERR_INTERNAL, "no loss gradient");
        ggml_set_input(m.t_lgrad);
        // checkpoint the softmaxes when all layers' blocks together exceed attn_block
        attn_reducers reducers;
        if (m.cfg.attn_block >= 0 && m.info.n_layer * attn_block_bytes(m, B, T, T) > m.cfg.attn_block) {
            const std::vector<ggml_tensor *> redone = recompute_attention(ctx, gf, chunks, fwd_nodes);
            m.attn_recomputed = (int) redone.size();
            reducers = find_attn_reducers(gf, redone, fwd_nodes);
        }
        if (!m.cfg.autograd_frozen) {
            m.n_rewritten     = rewrite_frozen_backward(m, ctx, gf);
            m.n_rewritten_op  = rewrite_out_prods(m, ctx, gf);
        }
        m.n_pinned = pin_backward_operands(ctx, gf);

        // rebuild the computed graph from the outputs so leafs and use counts
        // reflect the rewrite; forward nodes stay first (same DFS order)
        ggml_build_forward_expand(gb, loss);
        order_attn_backward(gb, gf, reducers);
        for (ggml_tensor * p : m.params) {
            ggml_tensor * g = ggml_graph_get_grad(gf, p);
            if (!g) throw empo_error(EMPO_ERR_INTERNAL, std::string("no gradient for ") + p->name);
            if (g->op != GGML_OP_NONE) ggml_build_forward_expand(gb, g);
        }
    }
    m.graph = gb;
    *mul_lp_out = mul_lp;
    *mul_en_out = mul_en;
}

// the compute buffer m.graph needs (all backends), from ggml's allocator
// run without allocating on the measuring scheduler.
// ggml_backend_sched_split_graph rewrites the graph it splits: every source
// that crosses backends (an input on the CPU read by a device op, a CPU
// result read by the device, ...) is replaced in its consumer by that
// scheduler's copy, a tensor of the scheduler's own context that only that
// scheduler fills, at the start of its compute. Left in place, those copies
// reach m.sched, which takes them for ordinary tensors of the device: it
// allocates them, never fills them, and copies no input (measured on the
// SIM0 stand-in, and on an H100: one split with 0 inputs, get_rows reading
// garbage indices, a zero loss gradient). The sources are put back, so that
// m.sched splits the graph as it was built. With the CPU alone nothing
// crosses and nothing is rewritten.
static int64_t measure_graph(empo_model & m) {
    const int n = ggml_graph_n_nodes(m.graph);
    std::vector<ggml_tensor *> srcs((size_t) n * GGML_MAX_SRC);
    for (int i = 0; i < n; ++i) {
        memcpy(&srcs[(size_t) i * GGML_MAX_SRC], ggml_graph_node(m.graph, i)->src, sizeof(ggml_tensor *) * GGML_MAX_SRC);
    }
    size_t sizes[2] = { 0, 0 };
    ggml_backend_sched_reserve_size(m.sched_measure, m.graph, sizes);
    ggml_backend_sched_reset(m.sched_measure);
    for (int i = 0; i < n; ++i) {
        memcpy(ggml_graph_node(m.graph, i)->src, &srcs[(size_t) i * GGML_MAX_SRC], sizeof(ggml_tensor *) * GGML_MAX_SRC);
    }
    return (int64_t) sizes[0] + (int64_t) sizes[1];
}

static std::string mib(int64_t bytes) {
    char buf[64];
    snprintf(buf, sizeof(buf), "%.1f MiB (%lld bytes)", (double) bytes / (1 << 20), (long long) bytes);
    return buf;
}

// forward (coef == nullptr) or a training step (forward, coefficients from
// coef, backward into the gradient accumulators) in one scheduler compute
static void run(empo_model & m, const empo_batch & b, empo_coef_fn coef, void * user, float * logp, float * ent) {
    const bool with_backward = coef != nullptr;
    const int M = b.M;
    check_batch(m, b);
    ggml_tensor * mul_lp = nullptr, * mul_en = nullptr;
    build_graph(m, b, with_backward, &mul_lp, &mul_en);
    ggml_cgraph * gb = m.graph;
    ggml_tensor * lp = m.t_logp, * en = m.t_ent;
    if (m.prof_on) {
        m.prof_fwd.clear();
        for (int i = 0; i < m.n_fwd; ++i) m.prof_fwd.insert(ggml_graph_node(gb, i));
    }
    if (m.cap_on) {
        cap_clear(m);
        for (int i = 0; i < ggml_graph_n_nodes(gb); ++i) m.cap_index[ggml_graph_node(gb, i)] = i;
    }

    // ---- the cap, checked on the graph itself before anything is allocated
    const int64_t need = measure_graph(m);
    if (m.compute_cap >= 0 && need > m.compute_cap) {
        drop_graph(m);
        throw empo_error(EMPO_ERR_TOO_LARGE, std::string(with_backward ? "training" : "forward") + " graph of " +
                         std::to_string(b.B) + " sequence(s) × " + std::to_string(b.T) + " tokens, " + std::to_string(M) +
                         " rows × vocabulary " + std::to_string(m.info.n_vocab) + " needs a compute buffer of " + mib(need) +
                         ", above the cap of " + mib(m.compute_cap));
    }
    m.compute_last = need;
    m.compute_peak = std::max(m.compute_peak, need);

    ggml_backend_sched_reset(m.sched);
    if (with_backward) {
        // the MULs that read the coefficients run on the device that holds them
        ggml_backend_sched_set_tensor_backend(m.sched, mul_lp, m.backend);
        ggml_backend_sched_set_tensor_backend(m.sched, mul_en, m.backend);
    }
    if (!ggml_backend_sched_alloc_graph(m.sched, gb)) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the compute graph");
    m.n_splits = ggml_backend_sched_get_n_splits(m.sched);

    set_inputs(m, b);
    std::vector<float> snapshot;       // gradient accumulators before the step, restored on abort
    if (with_backward) {
        const float one = 1.0f;
        ggml_backend_tensor_set(m.t_lgrad, &one, 0, sizeof(float));
        snapshot.resize((size_t) ggml_nelements(m.opt.G)); // all accumulators: one flat copy
        ggml_backend_tensor_get(m.opt.G, snapshot.data(), 0, ggml_nbytes(m.opt.G));
        m.cb_node   = ggml_graph_node(gb, m.n_fwd - 1);
        m.cb_fn     = coef;
        m.cb_user   = user;
        m.cb_status = 0;
        m.cb_done   = false;
        m.cb_failed = false;
        m.cb_err.clear();
    }
    auto restore_grads = [&]() {
        ggml_backend_tensor_set(m.opt.G, snapshot.data(), 0, ggml_nbytes(m.opt.G));
    };
    m.prof_last_us = ggml_time_us();
    if (ggml_backend_sched_graph_compute(m.sched, gb) != GGML_STATUS_SUCCESS) {
        if (with_backward) restore_grads(); // a split may have accumulated already
        throw empo_error(EMPO_ERR_BACKEND, "graph compute failed");
    }
    ggml_backend_sched_synchronize(m.sched);
    if (m.cap_on && !m.cap_err.empty()) {
        if (with_backward) restore_grads();
        throw empo_error(EMPO_ERR_BACKEND, "node capture: " + m.cap_err);
    }
    ggml_backend_tensor_get(lp, logp, 0, M * sizeof(float));
    ggml_backend_tensor_get(en, ent,  0, M * sizeof(float));
    drop_graph(m);
    // a large compute buffer is not kept resident between calls
    if (m.cfg.keep_compute >= 0 && sched_alloc_bytes(m) > m.cfg.keep_compute) release_compute(m);
    if (with_backward && !m.cb_done) {
        // the backward ran with zero coefficients over possibly non-finite
        // activations (0·inf = NaN): undo its accumulation
        restore_grads();
        const std::string why = m.cb_failed ? m.cb_err : std::string("the eval callback was not reached");
        throw empo_error(m.cb_status != 0 ? EMPO_ERR_ABORTED : EMPO_ERR_INTERNAL, why);
    }
}

// the default cap: max(EMPO_COMPUTE_FLOOR + the model's bytes, the training
// graph of one sequence of min(n_ctx, EMPO_COMPUTE_REF_TOKENS) tokens with
// one trained row), measured on that graph
static int64_t default_compute_cap(empo_model & m, int32_t ref_tokens) {
    const int T = ref_tokens > 0 ? std::min(m.info.n_ctx, (int) ref_tokens) : std::min(m.info.n_ctx, EMPO_COMPUTE_REF_TOKENS);
    std::vector<int32_t> tokens(T, 0), pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    const int32_t row = T - 1, target = 0;
    empo_batch b{};
    b.B = 1; b.T = T; b.tokens = tokens.data(); b.pos = pos.data();
    b.M = 1; b.rows = &row; b.targets = &target;
    ggml_tensor * mul_lp = nullptr, * mul_en = nullptr;
    int64_t ref = 0;
    try {
        build_graph(m, b, true, &mul_lp, &mul_en);
        ref = measure_graph(m);
    } catch (...) {
        drop_graph(m);
        throw;
    }
    drop_graph(m);
    return std::max(EMPO_COMPUTE_FLOOR + m.frozen_bytes, ref);
}

// the model's own tensors the graph reads (llama.cpp's with init_shared;
// the trainable F32 weights in full training), without the Wᵀ copies and
// LoRA pairs
static int64_t frozen_bytes(const empo_model & m) {
    std::unordered_set<const ggml_tensor *> seen;
    int64_t n = 0;
    auto add = [&](const ggml_tensor * t) {
        if (t && seen.insert(t).second) n += (int64_t) ggml_nbytes(t);
    };
    add(m.tok_embd);
    add(m.out_norm);
    add(m.output.w);
    for (const empo_layer & L : m.layers) {
        add(L.attn_norm); add(L.ffn_norm); add(L.bq); add(L.bk); add(L.bv);
        for (const empo_linear & lin : L.lin) add(lin.w);
    }
    return n;
}

static void set_err(char * err, size_t len, const char * msg) {
    if (err && len > 0) {
        snprintf(err, len, "%s", msg);
    }
}

} // namespace

// ---------------------------------------------------------------- C API

#define EMPO_TRY(m, body)                                                         \
    try { body; return EMPO_OK; }                                                 \
    catch (const empo_error & e) { (m)->err = e.what(); return e.code; }          \
    catch (const std::exception & e) { (m)->err = e.what(); return EMPO_ERR_INTERNAL; } \
    catch (...) { (m)->err = "unknown exception"; return EMPO_ERR_INTERNAL; }

extern "C" {

struct empo_model_params empo_model_default_params(void) {
    empo_model_params p;
    p.n_threads       = 1;
    p.device          = 0;
    p.autograd_frozen = false;
    p.transpose_in_graph = false;
    p.lora_rank       = 8;
    p.lora_alpha      = 16.0f;
    p.lora_targets    = (1u << EMPO_TARGET_COUNT) - 1;
    p.full            = false;
    for (int k = 0; k < EMPO_TARGET_COUNT; ++k) p.target_tensor[k] = nullptr;
    p.max_compute     = 0;
    p.compute_ref_tokens = 0;
    p.compute_budget  = 0;
    p.keep_compute    = EMPO_COMPUTE_KEEP;
    p.attn_block      = 0;
    return p;
}

// path: load a GGUF; lm: build on a loaded llama.cpp model's tensors
static int init_impl(const char * path, const struct llama_model * lm, struct empo_model_params params,
                     struct empo_model ** out, char * err, size_t err_len) {
    if (!out) return EMPO_ERR_CONFIG;
    *out = nullptr;
    empo_model * m = nullptr;
    try {
        if (!path && !lm) throw empo_error(EMPO_ERR_CONFIG, "no path");
        const uint32_t targets = params.lora_targets & ((1u << EMPO_TARGET_COUNT) - 1);
        if (params.lora_rank < 1 || params.n_threads < 1 || params.device < 0 || params.device > 2 ||
            !std::isfinite(params.lora_alpha) || (targets == 0 && !params.full)) {
            throw empo_error(EMPO_ERR_CONFIG, "invalid empo_model_params");
        }
        if (params.full && targets != 0) throw empo_error(EMPO_ERR_CONFIG, "full training trains every weight: lora_targets must be 0");
        if (params.full && lm) throw empo_error(EMPO_ERR_CONFIG, "full training needs its own F32 copy of the weights: not on llama.cpp's (use empo_model_init)");
        m = new empo_model();
        m->cfg = params;
        if (m->cfg.attn_block == 0) m->cfg.attn_block = EMPO_ATTN_BLOCK; // the default, resolved once
        for (int k = 0; k < EMPO_TARGET_COUNT; ++k) {
            if (!params.target_tensor[k] || !params.target_tensor[k][0]) throw empo_error(EMPO_ERR_CONFIG, "missing target tensor name");
            m->target_tensor[k] = params.target_tensor[k];
            m->cfg.target_tensor[k] = nullptr; // not kept: the caller owns the strings
        }
        empo_llama_weights lw;
        if (lm) {
            empo_llama_extract(lm, lw);
            // the primary backend is the device that holds the shared weights
            if (ggml_backend_dev_t dev = shared_device(lw)) {
                m->backend = ggml_backend_dev_init(dev, nullptr);
                if (!m->backend) throw empo_error(EMPO_ERR_BACKEND, std::string("cannot init device ") + ggml_backend_dev_name(dev));
            }
        } else if (params.device != 0) {
            ggml_backend_load_all();
            m->backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU, nullptr);
            if (!m->backend && params.device == 1) throw empo_error(EMPO_ERR_BACKEND, "no GPU backend available");
        }
        if (m->backend && ggml_backend_is_cpu(m->backend)) { // a "GPU" that is the CPU backend: use it alone
            ggml_backend_free(m->backend);
            m->backend = nullptr;
        }
        if (!m->backend) {
            m->backend = ggml_backend_cpu_init();
            if (!m->backend) throw empo_error(EMPO_ERR_BACKEND, "cannot init the CPU backend");
            ggml_backend_cpu_set_n_threads(m->backend, params.n_threads);
        } else {
            // the CPU backend runs what the device cannot (the scheduler needs it last)
            m->backend_cpu = ggml_backend_cpu_init();
            if (!m->backend_cpu) throw empo_error(EMPO_ERR_BACKEND, "cannot init the CPU backend");
            ggml_backend_cpu_set_n_threads(m->backend_cpu, params.n_threads);
            // a device whose registry takes a thread count (as llama.cpp sets
            // its backends' through "ggml_backend_set_n_threads"; CUDA's does not)
            ggml_backend_dev_t dev = ggml_backend_get_device(m->backend);
            ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
            auto set_threads = reg ? (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads") : nullptr;
            if (set_threads) set_threads(m->backend, params.n_threads);
        }
        snprintf(m->info.backend, sizeof(m->info.backend), "%s", ggml_backend_name(m->backend));
        if (lm) load_shared(*m, lw);
        else    load_model(*m, path);
        // full training differentiates the token embedding's GET_ROWS into a
        // [C, V] gradient; ggml-cuda launches one grid row per vocabulary row
        // and a grid holds 65,535 ("CUDA error: invalid argument", an abort)
        if (m->cfg.full && m->info.n_vocab > 65535 && strncmp(ggml_backend_name(m->backend), "CUDA", 4) == 0) {
            throw empo_error(EMPO_ERR_CONFIG, "full training on " + std::string(ggml_backend_name(m->backend)) + ": a vocabulary of " +
                             std::to_string(m->info.n_vocab) + " rows is over the 65535 that ggml-cuda's GET_ROWS_BACK can write; train a LoRA, or train on the CPU");
        }
        snprintf(m->info.wtype_name, sizeof(m->info.wtype_name), "%s", ggml_type_name((ggml_type) m->info.wtype));
        m->sched = new_sched(*m);
        ggml_backend_sched_set_eval_callback(m->sched, sched_eval_cb, m);
        m->sched_measure = new_sched(*m);
        m->frozen_bytes = frozen_bytes(*m);
        m->compute_cap = params.max_compute < 0 ? -1
                       : params.max_compute > 0 ? params.max_compute
                       : params.compute_budget > 0 ? std::min(params.compute_budget, default_compute_cap(*m, params.compute_ref_tokens))
                       : default_compute_cap(*m, params.compute_ref_tokens);
        *out = m;
        return EMPO_OK;
    } catch (const empo_error & e) {
        set_err(err, err_len, e.what());
        empo_model_free(m);
        return e.code;
    } catch (const std::exception & e) {
        set_err(err, err_len, e.what());
        empo_model_free(m);
        return EMPO_ERR_INTERNAL;
    } catch (...) {
        set_err(err, err_len, "unknown exception");
        empo_model_free(m);
        return EMPO_ERR_INTERNAL;
    }
}

int empo_model_init(const char * path, struct empo_model_params params, struct empo_model ** out, char * err, size_t err_len) {
    if (!path) {
        set_err(err, err_len, "no path");
        if (out) *out = nullptr;
        return EMPO_ERR_CONFIG;
    }
    return init_impl(path, nullptr, params, out, err, err_len);
}

int empo_model_init_shared(const struct llama_model * model, struct empo_model_params params,
                           struct empo_model ** out, char * err, size_t err_len) {
    if (!model) {
        set_err(err, err_len, "no model");
        if (out) *out = nullptr;
        return EMPO_ERR_CONFIG;
    }
    return init_impl(nullptr, model, params, out, err, err_len);
}

int empo_model_shared_transposed_bytes(const struct llama_model * model, int64_t * out, char * err, size_t err_len) {
    if (out) *out = 0;
    if (!model || !out) {
        set_err(err, err_len, "no model or no output");
        return EMPO_ERR_CONFIG;
    }
    try {
        empo_llama_weights lw;
        empo_llama_extract(model, lw);
        int64_t n = 0;
        auto add = [&](const ggml_tensor * w) { // Wᵀ [ne1, ne0] as new_transposed makes it
            if (w) n += (int64_t) ggml_row_size(transposed_type(w->type), w->ne[1]) * w->ne[0];
        };
        add(lw.output ? lw.output : lw.tok_embd); // the head, as load_shared reads it
        for (const empo_llama_layer & L : lw.layers) for (const ggml_tensor * w : L.w) add(w);
        *out = n;
        return EMPO_OK;
    } catch (const std::exception & e) {
        set_err(err, err_len, e.what());
        return EMPO_ERR_ARCH;
    } catch (...) {
        set_err(err, err_len, "unknown exception");
        return EMPO_ERR_INTERNAL;
    }
}

void empo_model_free(struct empo_model * m) {
    if (!m) return;
    try {
        drop_graph(*m);
        if (m->sched)  ggml_backend_sched_free(m->sched);
        if (m->sched_measure) ggml_backend_sched_free(m->sched_measure);
        if (m->buf_w)  ggml_backend_buffer_free(m->buf_w);
        m->opt.release();
        if (m->ctx_w)  ggml_free(m->ctx_w);
        if (m->ctx_p)  ggml_free(m->ctx_p);
        if (m->backend) ggml_backend_free(m->backend);
        if (m->backend_cpu) ggml_backend_free(m->backend_cpu);
    } catch (...) {
    }
    delete m;
}

const char * empo_model_last_error(const struct empo_model * m) {
    return m ? m->err.c_str() : "null model";
}

int empo_model_get_info(const struct empo_model * m, struct empo_model_info * info) {
    if (!m || !info) return EMPO_ERR_CONFIG;
    *info = m->info;
    return EMPO_OK;
}

int empo_model_get_mem(const struct empo_model * m, struct empo_model_mem * mem) {
    if (!m || !mem) return EMPO_ERR_CONFIG;
    mem->weights      = m->buf_w ? (int64_t) ggml_backend_buffer_get_size(m->buf_w) : 0;
    mem->transposed   = m->bytes_transposed;
    mem->params       = (int64_t) m->opt.bytes();
    mem->compute_peak = m->compute_peak;
    mem->compute_last = m->compute_last;
    mem->compute_alloc = sched_alloc_bytes(*m);
    mem->compute_cap  = m->compute_cap;
    mem->frozen       = m->frozen_bytes;
    mem->n_rewritten  = m->n_rewritten;
    mem->n_rewritten_op = m->n_rewritten_op;
    mem->n_pinned     = m->n_pinned;
    mem->n_splits     = m->n_splits;
    mem->attn_chunks  = m->attn_chunks;
    mem->attn_recomputed = m->attn_recomputed;
    return EMPO_OK;
}

int empo_model_mem_reset_peak(struct empo_model * m) {
    if (!m) return EMPO_ERR_CONFIG;
    m->compute_peak = 0;
    return EMPO_OK;
}

int empo_model_n_params(const struct empo_model * m) {
    return m ? (int) m->params.size() : 0;
}

int empo_model_param_info(const struct empo_model * m, int i, struct empo_param_info * info) {
    if (!m || !info) return EMPO_ERR_CONFIG;
    if (i < 0 || i >= (int) m->param_meta.size()) return EMPO_ERR_SHAPE;
    *info = m->param_meta[i];
    return EMPO_OK;
}

static int param_io(struct empo_model * m, int i, int64_t n, bool grad, bool set, float * dst, const float * src) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (i < 0 || i >= (int) m->params.size()) throw empo_error(EMPO_ERR_SHAPE, "param index out of range");
        ggml_tensor * t = grad ? m->grads[i] : m->params[i];
        if (n != ggml_nelements(t)) throw empo_error(EMPO_ERR_SHAPE, "param size mismatch");
        if (set) ggml_backend_tensor_set(t, src, 0, ggml_nbytes(t));
        else     ggml_backend_tensor_get(t, dst, 0, ggml_nbytes(t));
    })
}

int empo_model_param_get(struct empo_model * m, int i, float * dst, int64_t n)       { return param_io(m, i, n, false, false, dst, nullptr); }
int empo_model_param_set(struct empo_model * m, int i, const float * src, int64_t n) { return param_io(m, i, n, false, true, nullptr, src); }
int empo_model_grad_get (struct empo_model * m, int i, float * dst, int64_t n)       { return param_io(m, i, n, true, false, dst, nullptr); }

int empo_model_grad_zero(struct empo_model * m) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        m->opt.zero_grads();
    })
}

int empo_model_grad_save(struct empo_model * m) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        m->grad_saved.resize((size_t) ggml_nelements(m->opt.G));
        ggml_backend_tensor_get(m->opt.G, m->grad_saved.data(), 0, ggml_nbytes(m->opt.G));
        m->grad_has_saved = true;
    })
}

int empo_model_grad_restore(struct empo_model * m) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (!m->grad_has_saved) throw empo_error(EMPO_ERR_STATE, "no gradient snapshot to restore");
        ggml_backend_tensor_set(m->opt.G, m->grad_saved.data(), 0, ggml_nbytes(m->opt.G));
    })
}

int empo_model_measure(struct empo_model * m, const struct empo_batch * batch, int with_backward, int64_t * bytes) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (!batch || !batch->tokens || !batch->pos || !batch->rows || !batch->targets || !bytes) {
            throw empo_error(EMPO_ERR_CONFIG, "null argument");
        }
        try {
            check_batch(*m, *batch);
            ggml_tensor * mul_lp = nullptr;
            ggml_tensor * mul_en = nullptr;
            build_graph(*m, *batch, with_backward != 0, &mul_lp, &mul_en);
            *bytes = measure_graph(*m);
            drop_graph(*m);
        } catch (...) {
            drop_graph(*m);
            throw;
        }
    })
}

int empo_model_forward(struct empo_model * m, const struct empo_batch * batch, float * logp, float * ent) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (!batch || !batch->tokens || !batch->pos || !batch->rows || !batch->targets || !logp || !ent) {
            throw empo_error(EMPO_ERR_CONFIG, "null argument");
        }
        try {
            run(*m, *batch, nullptr, nullptr, logp, ent);
        } catch (...) {
            drop_graph(*m);
            throw;
        }
    })
}

int empo_model_train(struct empo_model * m, const struct empo_batch * batch, empo_coef_fn coef, void * user,
                     float * logp, float * ent) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (!batch || !batch->tokens || !batch->pos || !batch->rows || !batch->targets || !logp || !ent || !coef) {
            throw empo_error(EMPO_ERR_CONFIG, "null argument");
        }
        try {
            run(*m, *batch, coef, user, logp, ent);
        } catch (...) {
            drop_graph(*m);
            throw;
        }
    })
}

int empo_model_adamw_step(struct empo_model * m, const struct empo_adamw_params * p, double * grad_norm, int * clipped) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        if (!p || !grad_norm || !clipped) throw empo_error(EMPO_ERR_CONFIG, "null argument");
        bool c = false;
        *grad_norm = m->opt.step(*p, &c);
        *clipped = c ? 1 : 0;
    })
}

int empo_model_moment_get(struct empo_model * m, int i, int which, float * dst, int64_t n) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, { m->opt.moment_io(i, which, dst, nullptr, n); })
}

int empo_model_moment_set(struct empo_model * m, int i, int which, const float * src, int64_t n) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, { m->opt.moment_io(i, which, nullptr, src, n); })
}

int empo_model_profile(struct empo_model * m, int on) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        m->prof_on = on != 0;
        m->prof.clear();
    })
}

int empo_model_capture(struct empo_model * m, int on, int64_t max_bytes) {
    if (!m) return EMPO_ERR_CONFIG;
    EMPO_TRY(m, {
        m->cap_on = on != 0;
        m->cap_max_bytes = max_bytes > 0 ? max_bytes : EMPO_CAPTURE_DEFAULT_BYTES;
        cap_clear(*m);
    })
}

int empo_model_capture_n(const struct empo_model * m) {
    return m ? (int) m->cap_info.size() : 0;
}

int empo_model_capture_info(const struct empo_model * m, int i, struct empo_node_info * info) {
    if (!m || !info) return EMPO_ERR_CONFIG;
    if (i < 0 || i >= (int) m->cap_info.size()) return EMPO_ERR_SHAPE;
    *info = m->cap_info[i];
    return EMPO_OK;
}

int empo_model_capture_get(const struct empo_model * m, int i, float * dst, int64_t n) {
    if (!m || (!dst && n > 0)) return EMPO_ERR_CONFIG;
    if (i < 0 || i >= (int) m->cap_data.size() || n != (int64_t) m->cap_data[i].size()) return EMPO_ERR_SHAPE;
    if (n > 0) memcpy(dst, m->cap_data[i].data(), (size_t) n * sizeof(float));
    return EMPO_OK;
}

int empo_model_profile_n(const struct empo_model * m) {
    return m ? (int) m->prof.size() : 0;
}

int empo_model_profile_get(const struct empo_model * m, int i, char * key, size_t key_len, int64_t * us, int64_t * count) {
    if (!m || i < 0 || i >= (int) m->prof.size()) return EMPO_ERR_SHAPE;
    auto it = m->prof.begin();
    std::advance(it, i);
    if (key && key_len > 0) snprintf(key, key_len, "%s", it->first.c_str());
    if (us) *us = it->second.first;
    if (count) *count = it->second.second;
    return EMPO_OK;
}

} // extern "C"
