// empo_llama.cpp — reads a loaded llama.cpp model's Qwen2 weight tensors and
// hyperparameters for the training graph (see empo_llama.h). Read-only use of
// the pinned module's internal headers; no exception escapes except to the
// caller in empo_train.cpp, which catches them at the C boundary.

#include "empo_llama.h"

#include "llama-model.h"
#include "llama-arch.h"

#include <stdexcept>

void empo_llama_extract(const llama_model * model, empo_llama_weights & w) {
    if (!model) throw std::runtime_error("null llama model");
    w.arch = llm_arch_name(model->arch);
    const llama_hparams & hp = model->hparams;
    w.n_layer       = (int) hp.n_layer;
    w.n_embd        = (int) hp.n_embd;
    w.n_head        = w.n_layer > 0 ? (int) hp.n_head(0) : 0;
    w.n_head_kv     = w.n_layer > 0 ? (int) hp.n_head_kv(0) : 0;
    w.n_ff          = w.n_layer > 0 ? (int) hp.n_ff(0) : 0;
    w.n_embd_head_k = (int) hp.n_embd_head_k;
    w.n_embd_head_v = (int) hp.n_embd_head_v;
    w.n_ctx_train   = (int) hp.n_ctx_train;
    w.rope_base     = hp.rope_freq_base_train;
    w.rope_freq_scale = hp.rope_freq_scale_train;
    w.norm_eps      = hp.f_norm_rms_eps;
    // llama.cpp's default scaling type is "linear" with factor 1 (= none)
    w.rope_scaling  = hp.rope_freq_scale_train != 1.0f ||
                      hp.rope_scaling_type_train == LLAMA_ROPE_SCALING_TYPE_YARN ||
                      hp.rope_scaling_type_train == LLAMA_ROPE_SCALING_TYPE_LONGROPE;
    w.n_vocab       = (int) model->vocab.n_tokens();
    w.tok_embd      = model->tok_embd;
    w.output_norm   = model->output_norm;
    w.output        = model->output;
    w.output_b      = model->output_b;
    // llama.cpp's qwen2 loader duplicates token_embd.weight as the output
    // when there is no output.weight (TENSOR_DUPLICATED): same name
    w.tied = w.output && w.tok_embd && std::string(ggml_get_name(w.output)) == ggml_get_name(w.tok_embd);
    w.layers.resize(model->layers.size());
    for (size_t il = 0; il < model->layers.size(); ++il) {
        const llama_layer & L = model->layers[il];
        empo_llama_layer & o = w.layers[il];
        o.attn_norm = L.attn_norm;
        o.ffn_norm  = L.ffn_norm;
        o.bq = L.bq; o.bk = L.bk; o.bv = L.bv; o.bo = L.bo;
        o.w[0] = L.wq; o.w[1] = L.wk; o.w[2] = L.wv; o.w[3] = L.wo;
        o.w[4] = L.ffn_gate; o.w[5] = L.ffn_up; o.w[6] = L.ffn_down;
    }
}
