#pragma once
#include <stdint.h>
#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

int   empo2_lora_count(struct llama_adapter_lora * ad);
int   empo2_lora_info(struct llama_adapter_lora * ad, int i, char * name, int name_len, int64_t * ne, int * type);
float empo2_lora_alpha(struct llama_adapter_lora * ad);
int   empo2_lora_set(struct llama_adapter_lora * ad, const char * name, const float * data, int64_t n);
int   empo2_lora_get(struct llama_adapter_lora * ad, const char * name, float * data, int64_t n);
int   empo2_invalidate_graph(struct llama_context * ctx);

#ifdef __cplusplus
}
#endif
