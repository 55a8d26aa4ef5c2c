// empo_forward.cpp — the forward graph: embeddings, the Qwen2 blocks with LoRA, the
// head on the trained rows and the log-softmax without underflow (build_forward),
// and the graph inputs (set_inputs).

#include "empo_train_internal.h"

namespace empo {

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

// Forward to logp [1, M] and entropy [1, M]; the attention in query chunks
// of Tq rows (attention()), each recorded in *chunks.
void build_forward(empo_model & m, ggml_context * ctx, int B, int T, int M, int Tq, graph_inputs & in,
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
    in.tidx   = in.flat ? ggml_new_tensor_1d(ctx, GGML_TYPE_I32, M)           // [M] target_j + j·V
                        : ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, M);        // [1, M] target_j
    ggml_set_input(in.tidx);

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
    //
    // A forward-only graph (in.flat: π_old, LogProbsAt) has no backward, so
    // z[target] is gathered directly from z viewed as [1, V·M] at target_j +
    // j·V: the same value bit for bit (the one-hot sum adds exact zeros to
    // it), without the one-hot's two [V, M] tensors and their three passes.
    ggml_tensor * zt;
    if (in.flat) {
        zt = ggml_reshape_2d(ctx, ggml_get_rows(ctx, ggml_reshape_2d(ctx, z, 1, V * M), in.tidx), 1, M); // [1, M] z[target]
    } else {
        ggml_tensor * zero = ggml_fill_inplace(ctx, ggml_step(ctx, z), 0.0f);       // [V, M] zeros, no gradient
        ggml_tensor * one  = ggml_fill_inplace(ctx, ggml_step(ctx, mu), 1.0f);      // [1, M] ones, no gradient
        ggml_tensor * hot  = ggml_set_rows(ctx, ggml_reshape_3d(ctx, zero, 1, V, M),
                                           ggml_reshape_3d(ctx, one, 1, 1, M), in.tidx); // [1, V, M]: 1 at (target_j, j)
        zt = ggml_sum_rows(ctx, ggml_mul(ctx, z, ggml_reshape_2d(ctx, hot, V, M))); // [1, M] z[target]
    }
    ggml_tensor * logp = ggml_sub(ctx, zt, lse);                                 // [1, M]
    ggml_set_name(logp, "logp");
    ggml_set_name(logS, "entropy");
    ggml_set_output(logp);
    ggml_set_output(logS);
    *out_logp = logp;
    *out_ent  = logS;
}

void set_inputs(empo_model & m, const empo_batch & b) {
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
    if (m.in.flat) { // z's flat index target_j + j·V (V·M < 2^31: checked by check_batch)
        const int64_t V = m.info.n_vocab;
        std::vector<int32_t> flat((size_t) M);
        for (int j = 0; j < M; ++j) flat[(size_t) j] = (int32_t) (b.targets[j] + (int64_t) j * V);
        ggml_backend_tensor_set(tidx, flat.data(), 0, M * sizeof(int32_t));
    } else {
        ggml_backend_tensor_set(tidx, b.targets, 0, M * sizeof(int32_t));
    }
}

} // namespace empo
