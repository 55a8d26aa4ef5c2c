// empo_llama.h — internal (C++ only): the weight tensors and hyperparameters
// of a loaded llama.cpp Qwen2 model, read from llama.cpp's internal
// llama_model struct (src/llama-model.h of the pinned module) by
// empo_llama.cpp, so that the training graph can be built on the very
// tensors the rollouts use.
#pragma once

#include "ggml.h"

#include <string>
#include <vector>

struct llama_model;

struct empo_llama_layer {
    ggml_tensor * attn_norm = nullptr, * ffn_norm = nullptr;
    ggml_tensor * bq = nullptr, * bk = nullptr, * bv = nullptr, * bo = nullptr;
    ggml_tensor * w[7] = {};   // q k v o gate up down (enum empo_target order)
};

struct empo_llama_weights {
    std::string arch;                      // llm_arch name, e.g. "qwen2"
    int   n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, n_embd_head_k = 0, n_embd_head_v = 0;
    int   n_ff = 0, n_vocab = 0, n_ctx_train = 0;
    float rope_base = 0, rope_freq_scale = 1, norm_eps = 0;
    bool  rope_scaling = false;            // any RoPE scaling type other than none
    ggml_tensor * tok_embd = nullptr, * output_norm = nullptr, * output = nullptr, * output_b = nullptr;
    bool  tied = false;                    // output duplicates token_embd.weight
    std::vector<empo_llama_layer> layers;
};

// Fills w from model; throws std::runtime_error on a layout it cannot read.
void empo_llama_extract(const llama_model * model, empo_llama_weights & w);
