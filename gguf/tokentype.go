package gguf

// Token types of the tokenizer.ggml.token_type array, as llama.cpp's
// llama_token_type: what modelgen writes and lora's Hugging Face export
// reads back.
const (
	TokenTypeNormal      int32 = 1
	TokenTypeUnknown     int32 = 2
	TokenTypeControl     int32 = 3
	TokenTypeUserDefined int32 = 4
	TokenTypeUnused      int32 = 5
	TokenTypeByte        int32 = 6
)
