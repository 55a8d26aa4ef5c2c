package modelgen

import "github.com/empo2/empo2/gguf"

// modelHeader is what every generated model's GGUF starts with: general.*
// and the architecture's shape keys, the same for qwen2 and bert.
type modelHeader struct {
	arch, name, description         string
	f16                             bool // general.file_type: LLAMA_FTYPE_MOSTLY_F16, else LLAMA_FTYPE_ALL_F32
	layers, ctx, hidden, ffn, heads int
}

// newModelWriter returns a gguf.Writer holding h's keys in llama.cpp's
// converter order (general.architecture, type, name, description,
// file_type, then ARCH.block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count); the caller adds the rest.
func newModelWriter(h modelHeader) *gguf.Writer {
	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	if h.f16 {
		fileType = 1 // LLAMA_FTYPE_MOSTLY_F16
	}
	w := gguf.NewWriter()
	w.AddKV("general.architecture", h.arch)
	w.AddKV("general.type", "model")
	w.AddKV("general.name", h.name)
	w.AddKV("general.description", h.description)
	w.AddKV("general.file_type", fileType)
	w.AddKV(h.arch+".block_count", uint32(h.layers))
	w.AddKV(h.arch+".context_length", uint32(h.ctx))
	w.AddKV(h.arch+".embedding_length", uint32(h.hidden))
	w.AddKV(h.arch+".feed_forward_length", uint32(h.ffn))
	w.AddKV(h.arch+".attention.head_count", uint32(h.heads))
	return w
}
