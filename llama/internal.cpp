// Helpers that need llama.cpp's internal C++ structs (src/llama-adapter.h,
// src/llama-context.h) of the pinned module. They are compiled against the
// same headers and flags as the library itself. No exception may escape.

#include "llama-adapter.h"
#include "llama-context.h"
#include "llama-memory.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "internal.h"

static const char * SUFFIX_A = ".lora_a";
static const char * SUFFIX_B = ".lora_b";

static bool ends_with(const std::string & s, const char * suf) {
    size_t n = strlen(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

// find the ggml tensor of a full adapter tensor name ("<base>.lora_a" or
// "<base>.lora_b"); NULL when absent.
static ggml_tensor * find_lora_tensor(llama_adapter_lora * ad, const char * cname) {
    std::string name(cname);
    bool is_a = ends_with(name, SUFFIX_A);
    bool is_b = ends_with(name, SUFFIX_B);
    if (!is_a && !is_b) {
        return nullptr;
    }
    std::string base = name.substr(0, name.size() - strlen(SUFFIX_A));
    auto it = ad->ab_map.find(base);
    if (it == ad->ab_map.end()) {
        return nullptr;
    }
    return is_a ? it->second.a : it->second.b;
}

extern "C" int empo2_lora_count(struct llama_adapter_lora * ad) {
    return (int) ad->ab_map.size() * 2;
}

extern "C" int empo2_lora_info(struct llama_adapter_lora * ad, int i, char * name, int name_len, int64_t * ne, int * type) {
    if (i < 0 || i >= (int) ad->ab_map.size() * 2) {
        return -1;
    }
    auto it = ad->ab_map.begin();
    std::advance(it, i / 2);
    ggml_tensor * t = (i % 2 == 0) ? it->second.a : it->second.b;
    snprintf(name, name_len, "%s", t->name);
    for (int d = 0; d < GGML_MAX_DIMS; d++) {
        ne[d] = t->ne[d];
    }
    *type = (int) t->type;
    return 0;
}

extern "C" float empo2_lora_alpha(struct llama_adapter_lora * ad) {
    return ad->alpha;
}

// lora_io copies n float32 values into (set) or out of the tensor,
// converting to or from its type (F32 or F16). Returns 0, -1 absent, -2 size
// mismatch, -3 type, -4 exception.
static int lora_io(llama_adapter_lora * ad, const char * name, float * data, int64_t n, bool set) {
    try {
        ggml_tensor * t = find_lora_tensor(ad, name);
        if (!t) {
            return -1;
        }
        if (ggml_nelements(t) != n || !ggml_is_contiguous(t)) {
            return -2;
        }
        if (t->type == GGML_TYPE_F32) {
            if (set) {
                ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t));
            } else {
                ggml_backend_tensor_get(t, data, 0, ggml_nbytes(t));
            }
        } else if (t->type == GGML_TYPE_F16) {
            std::vector<ggml_fp16_t> tmp(n);
            if (set) {
                ggml_fp32_to_fp16_row(data, tmp.data(), n);
                ggml_backend_tensor_set(t, tmp.data(), 0, ggml_nbytes(t));
            } else {
                ggml_backend_tensor_get(t, tmp.data(), 0, ggml_nbytes(t));
                ggml_fp16_to_fp32_row(tmp.data(), data, n);
            }
        } else {
            return -3;
        }
    } catch (...) {
        return -4;
    }
    return 0;
}

extern "C" int empo2_lora_set(struct llama_adapter_lora * ad, const char * name, const float * data, int64_t n) {
    return lora_io(ad, name, const_cast<float *>(data), n, true); // read only when set
}

extern "C" int empo2_lora_get(struct llama_adapter_lora * ad, const char * name, float * data, int64_t n) {
    return lora_io(ad, name, data, n, false);
}

// empo2_invalidate_graph makes the context rebuild its compute graph on the
// next decode and reserves compute buffers for the current adapter set.
// This llama.cpp version compares the adapter set of a cached graph by
// pointer only (llm_graph_params::allow_reuse), so without this a graph built
// before llama_set_adapter_lora/llama_rm_adapter_lora would be reused.
// graph_reserve resets the previous graph result, exactly as the context
// itself does after a memory update.
extern "C" int empo2_invalidate_graph(struct llama_context * ctx) {
    try {
        llama_memory_t mem = llama_get_memory(ctx);
        llama_memory_context_ptr mctx;
        if (mem) {
            mctx = mem->init_full();
            if (!mctx) {
                return -1;
            }
        }
        const uint32_t n_seqs   = ctx->n_seq_max();
        const uint32_t n_tokens = std::min(ctx->n_ctx(), ctx->n_ubatch());
        if (!ctx->graph_reserve(n_tokens, n_seqs, n_tokens, mctx.get())) {
            return -2;
        }
    } catch (...) {
        return -3;
    }
    return 0;
}
