// empo_backward.cpp — the training graph: the surrogate loss, autograd's backward and
// its rewrites (dX through frozen W as Wᵀ·dY, OUT_PRODs as MUL_MATs, pinned
// *_BACK operands), the order of its nodes (build_graph).

#include "empo_train_internal.h"

namespace empo {

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

// nodes (and leafs) of one graph whose attention runs in `chunks` query
// chunks per layer (≈ 40 nodes per chunk: forward, recompute, backward);
// the scheduler's hash set is 4× the largest (EMPO_ATTN_MAX_CHUNKS, or 1
// with chunking off)
size_t graph_size(const empo_model & m, int chunks) {
    return 4096 + (size_t) m.info.n_layer * (1024 + 40 * (size_t) std::max(chunks, 1));
}

int max_attn_chunks(const empo_model & m) {
    return m.cfg.attn_block < 0 ? 1 : EMPO_ATTN_MAX_CHUNKS;
}

void drop_graph(empo_model & m) {
    if (m.ctx_c) ggml_free(m.ctx_c);
    m.ctx_c = nullptr;
    m.graph = nullptr;
    if (m.buf_coef) ggml_backend_buffer_free(m.buf_coef);
    m.buf_coef = nullptr;
    if (m.ctx_coef) ggml_free(m.ctx_coef);
    m.ctx_coef = nullptr;
    m.t_logp = m.t_ent = m.t_clogp = m.t_cent = m.t_lgrad = m.t_unscale = nullptr;
    m.unscale_nodes.clear();
    m.cb_node = nullptr;
    m.cb_fn   = nullptr;
    m.cb_user = nullptr;
}

// Loss scaling (scale_coefficients in empo_step.cpp): the backward runs on
// S·L', so each contribution autograd adds into a parameter's gradient
// accumulator is multiplied by t_unscale = 1/S (a power of two: exact in
// F32) before its ADD. Autograd accumulates a parameter's gradient as a
// chain of in-place ADDs that starts at its accumulator (ggml_add_or_set
// with grad_accs); another op on the chain would escape the unscale, so it
// is refused. Returns the number of contributions unscaled.
int unscale_param_grads(empo_model & m, ggml_context * ctx, ggml_cgraph * gf) {
    std::unordered_set<const ggml_tensor *> chain(m.grads.begin(), m.grads.end());
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * t = ggml_graph_node(gf, i);
        if (!t->src[0] || !chain.count(t->src[0])) continue;
        if (t->op != GGML_OP_ADD || !t->src[1]) {
            throw empo_error(EMPO_ERR_INTERNAL, std::string("loss scaling: gradient accumulator updated by ") + ggml_op_desc(t));
        }
        ggml_tensor * u = ggml_mul(ctx, t->src[1], m.t_unscale);   // contribution / S
        t->src[1] = u;
        m.unscale_nodes.push_back(u);
        chain.insert(t);
        ++n;
    }
    return n;
}

// Builds m.graph for batch b: the forward (logp, ent) or, with_backward, the
// training graph (forward, the surrogate loss with the coefficient tensors,
// autograd's backward with the rewrites and pins). *mul_lp / *mul_en: the
// MULs that read the coefficients (training only).
void build_graph(empo_model & m, const empo_batch & b, bool with_backward,
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
    in.flat = !with_backward; // nothing differentiates z[target]: a gather, not the one-hot
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
        ggml_init_params cp = { ggml_tensor_overhead() * 3, nullptr, true };
        m.ctx_coef = ggml_init(cp);
        if (!m.ctx_coef) throw empo_error(EMPO_ERR_BACKEND, "ggml_init failed");
        m.t_clogp = ggml_new_tensor_2d(m.ctx_coef, GGML_TYPE_F32, 1, M);
        m.t_cent  = ggml_new_tensor_2d(m.ctx_coef, GGML_TYPE_F32, 1, M);
        ggml_set_name(m.t_clogp, "coef_logp");
        ggml_set_name(m.t_cent,  "coef_ent");
        if (m.ls_on) {
            m.t_unscale = ggml_new_tensor_1d(m.ctx_coef, GGML_TYPE_F32, 1);
            ggml_set_name(m.t_unscale, "loss_unscale");
        }
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
        if (m.ls_on) unscale_param_grads(m, ctx, gf);

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

} // namespace empo
