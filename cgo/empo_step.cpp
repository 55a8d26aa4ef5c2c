// empo_step.cpp — one forward or training step through the backend scheduler: the
// eval callback that reads logp/ent after the forward, asks the caller's
// objective for the coefficients and lets the backward run (sched_eval_cb,
// run); the compute cap measured on the graph; profile and node capture.

#include "empo_train_internal.h"

namespace empo {

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

bool is_view_op(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE;
}

// empties the capture (its settings stay)
void cap_clear(empo_model & m) {
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

// ggml_backend_sched eval callback (user_data = the model). Asks for the
// last forward node only; when it has been computed (all nodes before it
// too: splits keep the graph's node order), reads logp/ent, calls the
// caller's coefficient function and writes c_logp/c_ent into the primary
// device's buffer before the scheduler computes the backward nodes.
// Never throws (called from inside ggml).
// Loss scaling (empo_model_params.loss_scaling). The backward is linear in
// the coefficients, so scaling them by S = 2^k scales every gradient node
// by S, and unscale_param_grads divides each contribution by S in F32 before
// it reaches an accumulator (powers of two: exact, barring over- and
// underflow). The point is the F16 rounding of dY in dX = Wᵀ·dY (an F16 Wᵀ:
// ggml converts dY to the weight's dot type): a token-mean objective over
// n tokens has coefficients ~1/n, and the head's dZ = c·(onehot − p) holds
// c·p_v for every v, ~c/V for a 152k vocabulary — under F16's smallest
// normal (6.1e-5) long before real batch sizes, so F16's subnormals (and
// then 0) carry the gradient. k is chosen from the call's own coefficients
// (known before the backward starts): the largest |c| lands in
// [2^(L−1), 2^L), L = EMPO_LOSS_SCALE_LOG2 − ls_shift, whatever the batch
// size or the caller's loss scale. ls_shift grows after an overflow (run).
static void scale_coefficients(empo_model & m, std::vector<float> & cl, std::vector<float> & ce) {
    float amax = 0.0f;
    for (float x : cl) amax = std::max(amax, std::fabs(x));
    for (float x : ce) amax = std::max(amax, std::fabs(x));
    int k = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
        int e = 0;
        std::frexp(amax, &e);                                                   // amax ∈ [2^(e−1), 2^e)
        k = std::clamp(EMPO_LOSS_SCALE_LOG2 - m.ls_shift - e, -EMPO_LOSS_SCALE_MAX, EMPO_LOSS_SCALE_MAX);
    }
    for (float & x : cl) x = std::ldexp(x, k);
    for (float & x : ce) x = std::ldexp(x, k);
    const float u = std::ldexp(1.0f, -k);
    ggml_backend_tensor_set(m.t_unscale, &u, 0, sizeof(u));
    m.ls_log2 = k;
}

bool sched_eval_cb(ggml_tensor * t, bool ask, void * user_data) {
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
        if (!m.cb_have) { // a recompute after an overflow reuses the call's coefficients
            std::vector<float> lp(n), en(n);
            m.cb_cl.assign(n, 0.0f);
            m.cb_ce.assign(n, 0.0f);
            ggml_backend_tensor_get(m.t_logp, lp.data(), 0, n * sizeof(float));
            ggml_backend_tensor_get(m.t_ent,  en.data(), 0, n * sizeof(float));
            m.cb_status = m.cb_fn(m.cb_user, m.M, lp.data(), en.data(), m.cb_cl.data(), m.cb_ce.data());
            if (m.cb_status != 0) {
                m.cb_failed = true;
                m.cb_err = "the coefficient callback returned " + std::to_string(m.cb_status);
                return true;               // the scheduler goes on; the caller restores the gradients
            }
            m.cb_have = true;
        }
        std::vector<float> cl = m.cb_cl, ce = m.cb_ce;
        if (m.ls_on) scale_coefficients(m, cl, ce);
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
ggml_backend_sched_t new_sched(empo_model & m) {
    ggml_backend_t backends[2] = { m.backend, m.backend_cpu };
    const int n_backends = m.backend_cpu ? 2 : 1;
    // graph_size sizes the scheduler's hash set: nodes + leafs + split copies
    ggml_backend_sched_t s = ggml_backend_sched_new(backends, nullptr, n_backends, graph_size(m, max_attn_chunks(m)) * 4, false, false);
    if (!s) throw empo_error(EMPO_ERR_BACKEND, "cannot create the backend scheduler");
    return s;
}

// bytes of the compute buffers the scheduler holds now
int64_t sched_alloc_bytes(const empo_model & m) {
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


void check_batch(const empo_model & m, const empo_batch & b) {
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
int64_t measure_graph(empo_model & m) {
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
void run(empo_model & m, const empo_batch & b, empo_coef_fn coef, void * user, float * logp, float * ent) {
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
        for (ggml_tensor * u : m.unscale_nodes) ggml_backend_sched_set_tensor_backend(m.sched, u, m.backend); // read t_unscale
    }
    if (!ggml_backend_sched_alloc_graph(m.sched, gb)) throw empo_error(EMPO_ERR_BACKEND, "cannot allocate the compute graph");
    m.n_splits = ggml_backend_sched_get_n_splits(m.sched);

    std::vector<float> snapshot;       // gradient accumulators before the step, restored on abort
    auto restore_grads = [&]() {
        ggml_backend_tensor_set(m.opt.G, snapshot.data(), 0, ggml_nbytes(m.opt.G));
    };
    m.cb_have  = false;
    m.ls_shift = 0;
    m.ls_log2  = 0;
    for (int attempt = 0;; ++attempt) {
        set_inputs(m, b);
        if (with_backward) {
            const float one = 1.0f;
            ggml_backend_tensor_set(m.t_lgrad, &one, 0, sizeof(float));
            if (attempt == 0) {
                snapshot.resize((size_t) ggml_nelements(m.opt.G)); // all accumulators: one flat copy
                ggml_backend_tensor_get(m.opt.G, snapshot.data(), 0, ggml_nbytes(m.opt.G));
            }
            m.cb_node   = ggml_graph_node(gb, m.n_fwd - 1);
            m.cb_fn     = coef;
            m.cb_user   = user;
            m.cb_status = 0;
            m.cb_done   = false;
            m.cb_failed = false;
            m.cb_err.clear();
        }
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
        // a loss-scaled backward that overflowed: the same graph again (its
        // inputs set anew, the coefficients kept) at a scale 2^BACKOFF lower
        if (!with_backward || !m.ls_on || !m.cb_done || std::isfinite(m.opt.grad_sumsq())) break;
        restore_grads();
        ++m.ls_skips;
        if (attempt >= EMPO_LOSS_SCALE_RETRIES) {
            drop_graph(m);
            throw empo_error(EMPO_ERR_NONFINITE, "the gradient is not finite at loss scale 2^" + std::to_string(m.ls_log2) +
                             " after " + std::to_string(attempt) + " lower scales");
        }
        m.ls_shift += EMPO_LOSS_SCALE_BACKOFF;
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

// Is the backward loss-scaled? cfg.loss_scaling 0 (the default): where a
// frozen matrix is not F32, so that dX = Wᵀ·dY rounds dY to F16 (or BF16);
// 1: always; −1: never. LoRA only: full training (F32 weights, trained Wᵀ
// made in the graph) and the autograd backward (weights made F32) have no
// such rounding.
bool loss_scaling_applies(const empo_model & m) {
    if (m.cfg.loss_scaling < 0) return false;
    if (m.cfg.full || m.cfg.autograd_frozen) {
        if (m.cfg.loss_scaling > 0) throw empo_error(EMPO_ERR_CONFIG, "loss scaling is for the LoRA backward (not full training nor the autograd backward)");
        return false;
    }
    if (m.cfg.loss_scaling > 0) return true;
    for (const auto & kv : m.transposed) {
        if (kv.first->type != GGML_TYPE_F32) return true;
    }
    return false;
}

// the default cap: max(EMPO_COMPUTE_FLOOR + the model's bytes, the training
// graph of one sequence of min(n_ctx, EMPO_COMPUTE_REF_TOKENS) tokens with
// one trained row), measured on that graph
int64_t default_compute_cap(empo_model & m, int32_t ref_tokens) {
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
int64_t frozen_bytes(const empo_model & m) {
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

} // namespace empo
