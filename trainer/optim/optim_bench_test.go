package optim

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAdamWStep7BRank8 times clipping plus one AdamW step over the
// LoRA parameters of Qwen2.5-7B at rank 8 on all seven projections
// (28 layers × 720,896 = 20.2 M parameters).
func BenchmarkAdamWStep7BRank8(b *testing.B) {
	const layers, r = 28, 8
	shapes := [][2]int{{3584, 3584}, {3584, 512}, {3584, 512}, {3584, 3584}, {3584, 18944}, {3584, 18944}, {18944, 3584}}
	var sizes []int
	for l := 0; l < layers; l++ {
		for _, s := range shapes {
			sizes = append(sizes, s[0]*r, r*s[1])
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	params := make([][]float32, len(sizes))
	grads := make([][]float32, len(sizes))
	n := 0
	for i, s := range sizes {
		params[i] = make([]float32, s)
		grads[i] = make([]float32, s)
		for j := range grads[i] {
			grads[i][j] = float32(rng.NormFloat64())
		}
		n += s
	}
	opt, err := NewAdamW(DefaultAdamW(), sizes)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n) * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := ClipGradNorm(grads, 1e9); err != nil {
			b.Fatal(err)
		}
		if err := opt.Step(params, grads, 1e-4); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "params")
}
