package cgo

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/empo2/empo2/llama"
)

// BenchmarkEngineStart: the training engine's start on a real-size model
// (issue 40: 77 s on a 7B model on an H200, its transposed F16 copies) —
// Load (the GGUF read, the Wᵀ copies made and stored) and LoadShared on a
// loaded llama.Model (`empo2 train`'s path: llama.cpp's weights, only the
// Wᵀ copies made). The model is $EMPO2_START_MODEL, e.g.
//
//	empo2 model init --out m.gguf --preset qwen2.5-1.5b --tokenizer DIR --dtype f16
//	EMPO2_START_MODEL=m.gguf go test ./cgo/ -run '^$' -bench EngineStart -benchtime 1x
//
// Reports seconds per start (s/load, s/shared) and the Wᵀ bytes.
func BenchmarkEngineStart(b *testing.B) {
	path := os.Getenv("EMPO2_START_MODEL")
	if path == "" {
		b.Skip("EMPO2_START_MODEL is not set")
	}
	lora := LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}
	opts := Options{Threads: 2}
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	var tLoad, tShared time.Duration
	var wt int64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		m, err := Load(path, lora, opts)
		if err != nil {
			b.Fatal(err)
		}
		tLoad += time.Since(t0)
		wt = m.MemoryBytes().Transposed
		m.Close()
		t0 = time.Now()
		sh, err := LoadShared(lm, lora, opts)
		if err != nil {
			b.Fatal(err)
		}
		tShared += time.Since(t0)
		sh.Close()
	}
	b.ReportMetric(tLoad.Seconds()/float64(b.N), "s/load")
	b.ReportMetric(tShared.Seconds()/float64(b.N), "s/shared")
	b.ReportMetric(float64(wt)/(1<<30), "GiB-Wt")
}

// BenchmarkLossScaleCost: the step time and memory of the loss-scaled
// backward against the unscaled one (Options.LossScaling 0 / −1) on
// $EMPO2_START_MODEL (an F16 or quantized base): one sequence of 64
// tokens, 32 trained, LoRA rank 8 on every target, the two engines
// alternated, fastest of b.N rounds each.
func BenchmarkLossScaleCost(b *testing.B) {
	path := os.Getenv("EMPO2_START_MODEL")
	if path == "" {
		b.Skip("EMPO2_START_MODEL is not set")
	}
	lora := LoRAConfig{Rank: 8, Alpha: 16, Seed: 1, RandomB: true}
	on, err := Load(path, lora, Options{Threads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer on.Close()
	off, err := Load(path, lora, Options{Threads: 2, LossScaling: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer off.Close()
	if !on.MemoryBytes().LossScaling {
		b.Fatal("loss scaling is off on this base (an F32 model?)")
	}
	batch := benchBatch(rand.New(rand.NewPCG(1, 1)), on.Info().NVocab, 1, 64, 32)
	best := map[*Model]time.Duration{}
	for i := 0; i < b.N; i++ {
		for _, m := range []*Model{off, on} {
			if err := m.ZeroGrads(); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := m.ForwardBackward(batch, DefaultObjective(), 0); err != nil {
				b.Fatal(err)
			}
			if d := time.Since(t0); best[m] == 0 || d < best[m] {
				best[m] = d
			}
		}
	}
	mo, mf := on.MemoryBytes(), off.MemoryBytes()
	b.ReportMetric(float64(best[on].Milliseconds()), "ms/step-scaled")
	b.ReportMetric(float64(best[off].Milliseconds()), "ms/step-unscaled")
	b.ReportMetric(float64(mo.Compute)/(1<<20), "MiB-compute-scaled")
	b.ReportMetric(float64(mf.Compute)/(1<<20), "MiB-compute-unscaled")
	b.ReportMetric(float64(mo.LossScaleLog2), "log2-scale")
}
