// empo_attention.cpp — attention in query chunks (attention), the softmax recomputed in
// the backward (recompute_attention), and the chunk-by-chunk order of the
// attention backward (find_attn_reducers, order_attn_backward).

#include "empo_train_internal.h"

namespace empo {

// Query rows per attention chunk for a batch of B sequences of T tokens:
// T when one layer's score block [T, T, H·B] F32 fits attn_block (or
// chunking is off), else the most rows whose block [T, Tq, H·B] fits — at
// least 64 and at least T/EMPO_ATTN_MAX_CHUNKS, which bound the nodes per
// layer (a block may then exceed attn_block).
// bytes of one layer's score block [T, rows, H·B] F32
int64_t attn_block_bytes(const empo_model & m, int B, int T, int64_t rows) {
    return (int64_t) T * rows * m.info.n_head * B * (int64_t) sizeof(float);
}

int attn_rows(const empo_model & m, int B, int T) {
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
ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
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
std::vector<ggml_tensor *> recompute_attention(ggml_context * ctx, ggml_cgraph * gf, const std::vector<attn_chunk> & chunks,
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

static ggml_tensor * view_root(ggml_tensor * t) {
    while (t && is_view_op(t->op) && t->op != GGML_OP_NONE && t->src[0]) t = t->src[0];
    return t;
}

// the reducers of each recomputed chunk (before the rewrites: autograd's
// nodes, whose identity the rewrites keep)
attn_reducers find_attn_reducers(ggml_cgraph * gf, const std::vector<ggml_tensor *> & redone,
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
void order_attn_backward(ggml_cgraph * gb, ggml_cgraph * gf, const attn_reducers & r) {
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

} // namespace empo
