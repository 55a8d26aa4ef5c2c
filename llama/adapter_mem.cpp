// adapter_mem.cpp — LoRA adapters built from memory (no file) and written as
// a whole. Uses llama.cpp's internal structs (src/llama-adapter.h,
// src/llama-model.h) of the pinned module, the same way
// llama_adapter_lora_init_impl (llama-adapter.cpp) fills them: tensors
// "<W>.lora_a" ne [n_in, r] and "<W>.lora_b" ne [r, n_out] in the buffer type
// of the base tensor W (CPU when W sits in a CPU "extra" repack buffer),
// ab_map keyed by W's name, alpha from the caller. No exception escapes.

#include "llama-adapter.h"
#include "llama-model.h"
#include "ggml-backend.h"

#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "adapter_mem.h"

static ggml_backend_buffer_type_t lora_buft(const ggml_tensor * w) {
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(w->buffer);
    auto * cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu_dev) throw std::runtime_error("no CPU backend");
    auto * cpu_reg = ggml_backend_dev_backend_reg(cpu_dev);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(cpu_reg, "ggml_backend_dev_get_extra_bufts");
    if (get_extra) {
        for (ggml_backend_buffer_type_t * ex = get_extra(cpu_dev); ex && *ex; ++ex) {
            if (*ex == buft) return ggml_backend_dev_buffer_type(cpu_dev); // no LoRA in repack buffers
        }
    }
    return buft;
}

extern "C" struct llama_adapter_lora * empo2_lora_from_memory(struct llama_model * model, float alpha,
                                                              const struct empo2_lora_pair * pairs, int n,
                                                              char * err, int err_len) {
    llama_adapter_lora * ad = nullptr;
    try {
        if (!model || !pairs || n <= 0) throw std::runtime_error("no pairs");
        ad = new llama_adapter_lora();
        ad->alpha = alpha;
        std::map<ggml_backend_buffer_type_t, ggml_context *> ctx_map;
        for (int i = 0; i < n; ++i) {
            const empo2_lora_pair & p = pairs[i];
            const std::string base = p.base ? p.base : "";
            const ggml_tensor * w = model->get_tensor(base.c_str());
            if (!w) throw std::runtime_error("LoRA tensor '" + base + "' does not exist in the base model");
            if (p.rank <= 0 || w->ne[0] != p.n_in || w->ne[1] != p.n_out || w->ne[2] != 1 || w->ne[3] != 1) {
                throw std::runtime_error("tensor '" + base + "' has incorrect shape");
            }
            if (ad->ab_map.count(base)) throw std::runtime_error("'" + base + "' adapted twice");
            ggml_backend_buffer_type_t buft = lora_buft(w);
            ggml_context *& ctx = ctx_map[buft];
            if (!ctx) {
                ggml_init_params ip = { (size_t) (2 * n + 2) * ggml_tensor_overhead(), nullptr, true };
                ctx = ggml_init(ip);
                if (!ctx) throw std::runtime_error("ggml_init failed");
                ad->ctxs.emplace_back(ctx);
            }
            ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, p.n_in, p.rank);
            ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, p.rank, p.n_out);
            ggml_set_name(a, (base + ".lora_a").c_str());
            ggml_set_name(b, (base + ".lora_b").c_str());
            ad->ab_map[base] = llama_adapter_lora_weight(a, b);
        }
        for (auto & it : ctx_map) {
            ggml_backend_buffer_ptr buf { ggml_backend_alloc_ctx_tensors_from_buft(it.second, it.first) };
            if (!buf) throw std::runtime_error("failed to allocate the LoRA buffer");
            ad->bufs.emplace_back(std::move(buf));
        }
        if (empo2_lora_set_all(ad, pairs, n) != 0) throw std::runtime_error("writing the LoRA tensors failed");
        return ad;
    } catch (const std::exception & e) {
        if (err && err_len > 0) snprintf(err, (size_t) err_len, "%s", e.what());
    } catch (...) {
        if (err && err_len > 0) snprintf(err, (size_t) err_len, "unknown exception");
    }
    delete ad;
    return nullptr;
}

static void write_f(ggml_tensor * t, const float * src, std::vector<ggml_fp16_t> & tmp) {
    const int64_t n = ggml_nelements(t);
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, src, 0, ggml_nbytes(t));
    } else {
        tmp.resize(n);
        ggml_fp32_to_fp16_row(src, tmp.data(), n);
        ggml_backend_tensor_set(t, tmp.data(), 0, ggml_nbytes(t));
    }
}

extern "C" int empo2_lora_set_all(struct llama_adapter_lora * ad, const struct empo2_lora_pair * pairs, int n) {
    try {
        std::vector<llama_adapter_lora_weight *> ws(n);
        for (int i = 0; i < n; ++i) { // all checks before any write
            const empo2_lora_pair & p = pairs[i];
            auto it = ad->ab_map.find(p.base ? p.base : "");
            if (it == ad->ab_map.end() || !it->second.a || !it->second.b) return -1;
            ggml_tensor * a = it->second.a, * b = it->second.b;
            if (a->ne[0] != p.n_in || a->ne[1] != p.rank || b->ne[0] != p.rank || b->ne[1] != p.n_out ||
                !ggml_is_contiguous(a) || !ggml_is_contiguous(b) || !p.a || !p.b) return -2;
            for (ggml_tensor * t : { a, b }) {
                if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16) return -3;
            }
            ws[i] = &it->second;
        }
        std::vector<ggml_fp16_t> tmp;
        for (int i = 0; i < n; ++i) {
            write_f(ws[i]->a, pairs[i].a, tmp);
            write_f(ws[i]->b, pairs[i].b, tmp);
        }
    } catch (...) {
        return -4;
    }
    return 0;
}
