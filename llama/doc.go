// Package llama is an idiomatic Go layer over llama.cpp (llama.h) from the
// pinned github.com/ollama/ollama module, for the rollout side of EMPO²:
// loading GGUF models, tokenization and chat templates, batched sampling of
// N sequences from one shared prompt with the raw-model log-prob of every
// sampled token, teacher-forced scoring, LoRA adapters whose weights can be
// replaced in place after every training step, and mean-pooled,
// L2-normalized embeddings ([Embedder]) from a causal model or from a
// BERT-type encoder GGUF (llama_encode; such a model has no language-model
// head, so a non-embedding Context on it is refused).
//
// Conventions:
//
//   - One Go type per C handle: [Model] (llama_model), [Context]
//     (llama_context), [Adapter] (llama_adapter_lora). Constructors return
//     (*T, error); Close is idempotent and nil-safe; a finalizer is only a
//     backstop. Children keep their parents alive: a Context or Adapter holds
//     its Model, a Context holds the Adapters attached to it.
//   - No C types appear in the exported API; every C string is freed in the
//     function that made it and C memory is copied out at once.
//   - Errors are typed: sentinels such as [ErrModelLoad], [ErrContextFull],
//     [ErrPromptTooLong], [ErrDecode], [ErrBadAdapter], [ErrBadToken] are
//     wrapped with %w, so callers use errors.Is. Inputs are validated in Go
//     before they reach C, because llama.cpp/ggml abort the process on many
//     bad inputs (GGML_ASSERT). Panics are reserved for programmer mistakes.
//   - A Context is safe for use from several goroutines (calls are
//     serialized by a mutex); different Contexts run in parallel. A Model
//     may be shared by any number of Contexts.
//   - llama.cpp/ggml log output is routed into zerolog (llama INFO becomes
//     zerolog debug, DEBUG becomes trace; WARN and ERROR keep their level).
//
// KV cache and adapters: Score, ScoreBatch, Logits and Embed start from an
// empty KV cache. Generate reuses the longest common prefix of its prompt
// with what sequence 0 of the previous Generate left in the cache (its
// prompt plus its output), which makes multi-turn episodes cheap; the cache
// is tagged with the adapter state (an attach/detach/rescale counter plus
// every attached Adapter's SetTensor counter) and dropped when that state
// differs, so KV computed under old adapter weights is never reused.
// ContextParams.NoPrefixCache turns reuse off. Attaching, detaching or
// rescaling an adapter also forces llama.cpp to rebuild its compute graph
// (this llama.cpp version would otherwise reuse a graph built for the old
// adapter set).
package llama
