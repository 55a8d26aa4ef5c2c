// Package modelgen generates tiny Qwen2-architecture GGUF models with seeded
// random weights and a byte-level BPE tokenizer trained by this package, so
// that everything in empo2 can be tested without downloading model weights.
//
// The files load in llama.cpp exactly as a Qwen2.5 GGUF does: architecture
// "qwen2", the same metadata keys and tensor names (q/k/v biases included;
// output.weight unless the embeddings are tied), a GPT-2-style byte-level BPE
// vocabulary ("gpt2" model, "qwen2" pre-tokenizer) whose first 256 tokens are
// the 256 byte symbols (so every byte string is representable), the ChatML
// control tokens <|endoftext|>, <|im_start|>, <|im_end|>, and Qwen2.5's
// ChatML chat template. The same Config (seed included) always gives a
// byte-identical file.
//
// Instead of a trained vocabulary, a model can carry a real one:
// LoadHFTokenizer converts a Hugging Face byte-level BPE tokenizer
// (tokenizer.json, tokenizer_config.json; Qwen2/2.5/3, Llama 3) to the GGUF
// vocabulary exactly as llama.cpp's convert_hf_to_gguf.py writes it, and
// keeps the original files in the GGUF for a Hugging Face export. Presets
// (LookupPreset) give Qwen2.5-0.5B/1.5B/3B/7B's real dimensions.
//
// WriteBERT writes the other kind of model empo2 needs, a tiny encoder-only
// embedding model that llama.cpp loads as architecture "bert" (as it loads
// a converted all-MiniLM-L6-v2): learned positions, token types, post-
// LayerNorm blocks, non-causal attention, mean pooling, and a WordPiece
// vocabulary ([PAD] [UNK] [CLS] [SEP] [MASK], "##" continuation pieces)
// trained by TrainWordPiece and spelled in the GGUF as llama.cpp's
// converter spells it.
package modelgen
