// empo_adamw.cpp — AdamW on the backend over the flat parameter / gradient / moment
// buffer (adamw_state), and the global gradient norm and clipping.

#include "empo_train_internal.h"

namespace empo {

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

double adamw_state::grad_sumsq() {
    small_graph sg(16);
    ggml_tensor * rs = ggml_sum_rows(sg.ctx, ggml_sqr(sg.ctx, G));   // [1, R]
    ggml_set_output(rs);
    ggml_build_forward_expand(sg.gf, rs);
    sg.compute(backend, galloc);
    std::vector<float> r(ggml_nelements(rs));
    ggml_backend_tensor_get(rs, r.data(), 0, ggml_nbytes(rs));
    double ss = 0;
    for (float x : r) ss += (double) x;
    return ss;
}

double adamw_state::step(const empo_adamw_params & prm, bool * clipped) {
    if (!(prm.t >= 1) || !std::isfinite(prm.lr) || prm.lr < 0 || !(prm.beta1 >= 0 && prm.beta1 < 1) ||
        !(prm.beta2 >= 0 && prm.beta2 < 1) || !(prm.eps > 0) || !(prm.weight_decay >= 0) || std::isnan(prm.max_norm)) {
        throw empo_error(EMPO_ERR_CONFIG, "invalid AdamW parameters");
    }
    // ---- global gradient norm ‖G‖₂ (padding is zero): row sums of G² on the
    // backend (threads split rows; each row summed in double by ggml-cpu's
    // ggml_vec_sum_f32), the R row sums added in double here
    const double norm = std::sqrt(grad_sumsq());
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

} // namespace empo
