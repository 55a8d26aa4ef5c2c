#pragma once
// adapter_mem.h — LoRA adapters of llama.cpp built from memory and updated
// as a whole (see adapter_mem.cpp).
#include <stdint.h>
#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// One LoRA pair for a base weight W (ggml ne [n_in, n_out]):
// a: ne [n_in, rank] (rank rows of n_in floats), b: ne [rank, n_out].
struct empo2_lora_pair {
    const char *  base;   // base tensor name, e.g. "blk.0.attn_q.weight"
    int64_t       n_in, n_out, rank;
    const float * a;      // [n_in*rank], read during the call only
    const float * b;      // [rank*n_out]
};

// Build a llama_adapter_lora for model from n pairs (F32 tensors in the
// buffer type of each base tensor, as llama_adapter_lora_init places them).
// Returns NULL and a message in err on failure (missing base tensor, wrong
// shapes, allocation). Free with llama_adapter_lora_free.
struct llama_adapter_lora * empo2_lora_from_memory(struct llama_model * model, float alpha,
                                                   const struct empo2_lora_pair * pairs, int n,
                                                   char * err, int err_len);

// Replace the values of all n pairs (F32 or F16 tensors, converted). Either
// every shape matches and everything is written, or nothing is written
// (all checks come first). 0 on success, -1 missing pair, -2 shape, -3
// type, -4 exception.
int empo2_lora_set_all(struct llama_adapter_lora * ad, const struct empo2_lora_pair * pairs, int n);

#ifdef __cplusplus
}
#endif
