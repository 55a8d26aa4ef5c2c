// Package cbench is a test-only helper: a plain C generation loop over
// llama.h (prefill, llama_memory_seq_cp, batched decode, llama.cpp's own
// sampler chain, or no sampling at all: the decode-only roof), the
// baseline that the llama package's benchmarks compare its Go API against
// on the same llama_context.
package cbench

/*
#cgo CPPFLAGS: -I${SRCDIR}/../../../third_party/ollama/llama/llama.cpp/include -I${SRCDIR}/../../../third_party/ollama/ml/backend/ggml/ggml/include
#include <stdlib.h>
#include "llama.h"

// Generates n_gen tokens for each of n_seq sequences from one prompt.
// fixed >= 0: no sampling at all, every sequence's next token is fixed (the
// decode-only roof; the logits are still computed). Returns 0 on success,
// the failing llama_decode code otherwise.
static int cbench_generate(struct llama_context * ctx, const llama_token * prompt, int n_prompt,
		int n_seq, int n_gen, float temp, int top_k, float top_p, float min_p, uint32_t seed, int fixed) {
	llama_memory_t mem = llama_get_memory(ctx);
	llama_memory_clear(mem, true);
	int n_batch = (int) llama_n_batch(ctx);
	int cap = n_batch > n_seq ? n_batch : n_seq;
	struct llama_batch batch = llama_batch_init(cap, 0, 1);
	int rc = 0;
	for (int start = 0; start < n_prompt && rc == 0; start += n_batch) {
		int end = start + n_batch < n_prompt ? start + n_batch : n_prompt;
		batch.n_tokens = 0;
		for (int i = start; i < end; i++) {
			int k = batch.n_tokens++;
			batch.token[k] = prompt[i];
			batch.pos[k] = i;
			batch.n_seq_id[k] = 1;
			batch.seq_id[k][0] = 0;
			batch.logits[k] = i == n_prompt - 1;
		}
		rc = llama_decode(ctx, batch);
	}
	struct llama_sampler ** smpl = malloc(sizeof(*smpl) * n_seq);
	llama_token * last = malloc(sizeof(*last) * n_seq);
	for (int s = 0; s < n_seq; s++) {
		if (s > 0) {
			llama_memory_seq_cp(mem, 0, s, -1, -1);
		}
		smpl[s] = llama_sampler_chain_init(llama_sampler_chain_default_params());
		if (top_k > 0) llama_sampler_chain_add(smpl[s], llama_sampler_init_top_k(top_k));
		if (top_p > 0 && top_p < 1) llama_sampler_chain_add(smpl[s], llama_sampler_init_top_p(top_p, 1));
		if (min_p > 0) llama_sampler_chain_add(smpl[s], llama_sampler_init_min_p(min_p, 1));
		llama_sampler_chain_add(smpl[s], llama_sampler_init_temp(temp));
		llama_sampler_chain_add(smpl[s], llama_sampler_init_dist(seed + (uint32_t) s));
		if (rc == 0) {
			last[s] = fixed >= 0 ? fixed : llama_sampler_sample(smpl[s], ctx, -1);
		}
	}
	for (int step = 1; step < n_gen && rc == 0; step++) {
		batch.n_tokens = n_seq;
		for (int s = 0; s < n_seq; s++) {
			batch.token[s] = last[s];
			batch.pos[s] = n_prompt + step - 1;
			batch.n_seq_id[s] = 1;
			batch.seq_id[s][0] = s;
			batch.logits[s] = 1;
		}
		rc = llama_decode(ctx, batch);
		for (int s = 0; s < n_seq && rc == 0; s++) {
			last[s] = fixed >= 0 ? fixed : llama_sampler_sample(smpl[s], ctx, s);
		}
	}
	for (int s = 0; s < n_seq; s++) {
		llama_sampler_free(smpl[s]);
	}
	free(smpl);
	free(last);
	llama_batch_free(batch);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// Params of one C generation run.
type Params struct {
	NSeq, NGen  int
	Temperature float32
	TopK        int
	TopP, MinP  float32
	Seed        uint32
	// DecodeOnly: no sampling, every next token is Fixed (the decoder's own
	// pace; llama.cpp still computes the logits).
	DecodeOnly bool
	Fixed      int32
}

// Generate runs the C loop on ctx (a *llama_context, passed as
// unsafe.Pointer because cgo types are per package) and returns its
// wall time. The caller guarantees prompt ids are valid and that the
// context has room (n_seq_max >= NSeq, n_ctx_seq >= len(prompt)+NGen).
func Generate(ctx unsafe.Pointer, prompt []int32, p Params) (time.Duration, error) {
	if len(prompt) == 0 || p.NSeq < 1 || p.NGen < 1 {
		return 0, fmt.Errorf("cbench: bad arguments")
	}
	cp := (*C.llama_token)(C.malloc(C.size_t(len(prompt)) * C.size_t(unsafe.Sizeof(C.llama_token(0)))))
	defer C.free(unsafe.Pointer(cp))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(cp)), len(prompt)), prompt)
	fixed := -1
	if p.DecodeOnly {
		fixed = int(max(p.Fixed, 0))
	}
	start := time.Now()
	rc := C.cbench_generate((*C.struct_llama_context)(ctx), cp, C.int(len(prompt)), C.int(p.NSeq), C.int(p.NGen),
		C.float(p.Temperature), C.int(p.TopK), C.float(p.TopP), C.float(p.MinP), C.uint32_t(p.Seed), C.int(fixed))
	d := time.Since(start)
	if rc != 0 {
		return d, fmt.Errorf("cbench: llama_decode returned %d", int(rc))
	}
	return d, nil
}
