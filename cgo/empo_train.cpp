// empo_train.cpp — the C API of the training engine (empo_train.h); the graph
// is described in empo_train_internal.h.

#include "empo_train_internal.h"

using namespace empo;

static void set_err(char * err, size_t len, const char * msg) {
    if (err && len > 0) {
        snprintf(err, len, "%s", msg);
    }
}

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
    p.loss_scaling    = 0;
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
        if (lm) {
            char ft[32] = "";                 // general.file_type, as llama.cpp keeps its metadata
            const int64_t file_type = llama_model_meta_val_str(lm, "general.file_type", ft, sizeof(ft)) > 0 ? strtoll(ft, nullptr, 10) : -1;
            load_shared(*m, lw, file_type);
        } else {
            load_model(*m, path);
        }
        // full training differentiates the token embedding's GET_ROWS into a
        // [C, V] gradient; ggml-cuda launches one grid row per vocabulary row
        // and a grid holds 65,535 ("CUDA error: invalid argument", an abort)
        if (m->cfg.full && m->info.n_vocab > 65535 && strncmp(ggml_backend_name(m->backend), "CUDA", 4) == 0) {
            throw empo_error(EMPO_ERR_CONFIG, "full training on " + std::string(ggml_backend_name(m->backend)) + ": a vocabulary of " +
                             std::to_string(m->info.n_vocab) + " rows is over the 65535 that ggml-cuda's GET_ROWS_BACK can write; train a LoRA, or train on the CPU");
        }
        m->ls_on = loss_scaling_applies(*m);
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
    mem->loss_scale_on   = m->ls_on ? 1 : 0;
    mem->loss_scale_log2 = m->ls_log2;
    mem->loss_scale_skips = m->ls_skips;
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
