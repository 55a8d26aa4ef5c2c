// Package marchbench measures a square F32 ggml matmul on the CPU backend, to
// show what the Makefile's -march flag is worth: cgo compiles ggml's kernels
// with no -march flag by default (SSE2 only).
package marchbench

/*
#cgo CPPFLAGS: -I${SRCDIR}/../../third_party/ollama/ml/backend/ggml/ggml/include
#include <stdlib.h>
#include <time.h>
#include "ggml.h"
#include "ggml-cpu.h"

// empo_matmul_gflops times reps products C = A·B of n×n F32 matrices with
// ggml's CPU kernels on nthreads threads; returns GFLOP/s (2n³ per product),
// or a negative value when ggml cannot allocate.
static double empo_matmul_gflops(int n, int nthreads, int reps) {
	struct ggml_init_params ip = { (size_t)n*n*4*4 + 64*1024*1024, NULL, false };
	struct ggml_context * ctx = ggml_init(ip);
	if (!ctx) return -1;
	struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n); // [n, n]
	struct ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n); // [n, n]
	float * pa = (float *) a->data, * pb = (float *) b->data;
	unsigned int s = 12345;
	for (int i = 0; i < n*n; i++) {
		s = s*1103515245u + 12345u; pa[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
		s = s*1103515245u + 12345u; pb[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
	}
	struct ggml_tensor * c = ggml_mul_mat(ctx, a, b); // [n, n]
	struct ggml_cgraph * gf = ggml_new_graph(ctx);
	ggml_build_forward_expand(gf, c);
	ggml_graph_compute_with_ctx(ctx, gf, nthreads); // warm-up
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int r = 0; r < reps; r++) ggml_graph_compute_with_ctx(ctx, gf, nthreads);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double sec = (t1.tv_sec - t0.tv_sec) + 1e-9*(t1.tv_nsec - t0.tv_nsec);
	ggml_free(ctx);
	return 2.0*n*(double)n*n*reps / sec / 1e9;
}
*/
import "C"

import (
	"fmt"

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src" // links ggml
)

// MatmulGFLOPS returns the GFLOP/s of reps n×n F32 matmuls on threads threads.
func MatmulGFLOPS(n, threads, reps int) (float64, error) {
	if n <= 0 || n > 8192 || threads <= 0 || reps <= 0 {
		return 0, fmt.Errorf("marchbench: bad arguments n=%d threads=%d reps=%d", n, threads, reps)
	}
	g := float64(C.empo_matmul_gflops(C.int(n), C.int(threads), C.int(reps)))
	if g < 0 {
		return 0, fmt.Errorf("marchbench: ggml could not allocate %d×%d matrices", n, n)
	}
	return g, nil
}
