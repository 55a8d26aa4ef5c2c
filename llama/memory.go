package llama

/*
#include "llama.h"
*/
import "C"

// memory wraps the context's llama_memory_t (KV cache).
type memory struct{ m C.llama_memory_t }

func (c *Context) memory() memory { return memory{C.llama_get_memory(c.c)} }

// seqCopy makes dst share (unified KV) or copy (per-sequence KV streams)
// the whole of src's cache. Both ids are < NSeqMax (checked by callers).
func (m memory) seqCopy(src, dst int) {
	C.llama_memory_seq_cp(m.m, C.llama_seq_id(src), C.llama_seq_id(dst), -1, -1)
}

// isEOG reports whether tok (already validated) ends generation.
func (m *Model) isEOG(tok int32) bool {
	return m.eog[tok]
}
