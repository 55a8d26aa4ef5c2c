package cgo

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// model100M: 12 layers, hidden 768, 12 heads, 2 KV heads, FFN 2048, vocab 8192.
func model100M() modelgen.Config {
	c := modelgen.DefaultConfig()
	c.Layers, c.Hidden, c.Heads, c.KVHeads, c.FFN, c.Vocab, c.Ctx = 12, 768, 12, 2, 2048, 8192, 2048
	return c
}

// flops counts matmul FLOPs (2·m·n·k) of one forward pass over B sequences
// of T tokens with M rows projected to the vocabulary, LoRA included.
func forwardFLOPs(info ModelInfo, r int, B, T, M int) float64 {
	C, F, V := float64(info.NEmbd), float64(info.FFN), float64(info.NVocab)
	Dkv := float64(info.HeadDim * info.NHeadKV)
	N := float64(B * T)
	lin := C*C + 2*C*Dkv + C*C + 3*C*F                               // q, k, v, o, gate, up, down
	lora := float64(r) * (2*C + C + Dkv + C + Dkv + C + C + 3*(C+F)) // A and B of all 7 targets
	attn := 2 * 2 * float64(B) * float64(T) * float64(T) * C         // K·Q and V·att, full T×T (ggml computes the masked half too)
	return float64(info.NLayer)*(2*N*(lin+lora)+attn) + 2*float64(M)*C*V
}

// trainFLOPs: forward + backward. Backward: dX through every frozen linear and
// the head (same FLOPs as forward), attention backward (2× forward: dQ, dK
// and dV, datt), LoRA dX and dA/dB (2× LoRA forward).
func trainFLOPs(info ModelInfo, r int, B, T, M int) float64 {
	C, F, V := float64(info.NEmbd), float64(info.FFN), float64(info.NVocab)
	Dkv := float64(info.HeadDim * info.NHeadKV)
	N := float64(B * T)
	lin := C*C + 2*C*Dkv + C*C + 3*C*F
	lora := float64(r) * (2*C + C + Dkv + C + Dkv + C + C + 3*(C+F))
	attn := 2 * 2 * float64(B) * float64(T) * float64(T) * C
	fwd := float64(info.NLayer)*(2*N*(lin+lora)+attn) + 2*float64(M)*C*V
	bwd := float64(info.NLayer)*(2*N*lin+2*2*N*lora+2*attn) + 2*float64(M)*C*V
	return fwd + bwd
}

func benchBatch(rng *rand.Rand, V, B, T, respLen int) []Sequence {
	batch := make([]Sequence, B)
	for b := range batch {
		s := Sequence{Tokens: randTokens(rng, T, V), Trained: make([]bool, T), OldLogp: make([]float32, T), Advantage: make([]float32, T)}
		for t := T - respLen; t < T; t++ {
			s.Trained[t] = true
			s.OldLogp[t] = -4 // r ≈ e^{-2..}: some clipped, some not: realistic work either way
			s.Advantage[t] = float32(rng.NormFloat64())
		}
		batch[b] = s
	}
	return batch
}

// benchTrain measures, on the same model in the same run, a training step
// (ForwardBackward), llama.cpp's own prefill of the same sequences (llama
// package, Context.Logits: one llama_decode of T tokens per sequence, logits
// for the last token only, base model without adapter, same thread count)
// and, for reference, the training graph's own forward (LogProbsBatch,
// logits at every position). It reports tokens/s, FLOP/s and the ratio of
// training FLOP/s to llama.cpp prefill FLOP/s (the target ≥ 0.5).
// FLOPs are the useful matmul FLOPs of forwardFLOPs/trainFLOPs, counted the
// same way for all three (llama.cpp's attention over KV cells padded to 256
// is not counted as extra work).
func benchTrain(b *testing.B, cfg modelgen.Config, opts Options, B, T, respLen, rounds int) {
	path := tinyModel(b, cfg)
	lora := LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}
	m, err := Load(path, lora, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	info := m.Info()
	rng := rand.New(rand.NewPCG(1, 1))
	batch := benchBatch(rng, info.NVocab, B, T, respLen)
	seqs := make([][]int32, B)
	for i := range batch {
		seqs[i] = batch[i].Tokens
	}
	obj := DefaultObjective()
	// llama.cpp's prefill of the same sequences on the same model
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	threads := opts.Threads
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: T, NBatch: T, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer lctx.Close()
	llamaPrefill := func() {
		for _, s := range seqs {
			if _, err := lctx.Logits(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	llamaPrefill()
	// warm-up (allocates the compute buffers)
	if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
		b.Fatal(err)
	}
	if _, err := m.LogProbsBatch(seqs); err != nil {
		b.Fatal(err)
	}
	// The machine is shared: each iteration alternates `rounds` train steps
	// and prefills and keeps the fastest of each (robust to contention).
	var tTrain, tPrefill, tLlama time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bestT, bestP, bestL := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
		for r := 0; r < rounds; r++ {
			t0 := time.Now()
			if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
				b.Fatal(err)
			}
			bestT = min(bestT, time.Since(t0))
			mem := m.MemoryBytes()
			t0 = time.Now()
			if _, err := m.LogProbsBatch(seqs); err != nil {
				b.Fatal(err)
			}
			bestP = min(bestP, time.Since(t0))
			t0 = time.Now()
			llamaPrefill()
			bestL = min(bestL, time.Since(t0))
			if i == 0 && r == 0 {
				M := B * respLen
				b.ReportMetric(float64(mem.ComputeLast)/float64(M), "compute-B/trained-tok")
				b.ReportMetric(float64(mem.ComputeLast)/float64(B*T), "compute-B/tok")
				b.ReportMetric(float64(mem.Weights)/(1<<20), "weights-MiB")
				b.ReportMetric(float64(mem.Transposed)/(1<<20), "transposed-MiB")
			}
		}
		tTrain += bestT
		tPrefill += bestP
		tLlama += bestL
	}
	b.StopTimer()
	n := float64(b.N)
	M := B * respLen
	st := tTrain.Seconds() / n
	sp := tPrefill.Seconds() / n
	trainF := trainFLOPs(info, lora.Rank, B, T, M) / st
	prefF := forwardFLOPs(info, lora.Rank, B, T, B*(T-1)) / sp
	sl := tLlama.Seconds() / n
	llamaF := forwardFLOPs(info, 0, B, T, B) / sl // no adapter, logits for the last token
	b.ReportMetric(float64(B*T)/st, "train-tok/s")
	b.ReportMetric(float64(M)/st, "trained-tok/s")
	b.ReportMetric(float64(B*T)/sl, "llama-prefill-tok/s")
	b.ReportMetric(float64(B*T)/sp, "graph-fwd-tok/s")
	b.ReportMetric(trainF/1e9, "train-GFLOP/s")
	b.ReportMetric(llamaF/1e9, "llama-prefill-GFLOP/s")
	b.ReportMetric(prefF/1e9, "graph-fwd-GFLOP/s")
	b.ReportMetric(trainF/llamaF, "train/llama-prefill-FLOPs-ratio")
	b.ReportMetric(trainF/prefF, "train/graph-fwd-FLOPs-ratio")
	b.ReportMetric(st*1e3, "ms/train-step")
}

// The benchmarks use one thread: on a machine whose cores are shared, ggml
// workers busy-wait at barriers and 2 threads can be far slower than 1; one
// thread also gives comparable numbers run to run. Training and llama.cpp
// prefill always run with the same thread count.

func BenchmarkTrainTiny(b *testing.B) {
	benchTrain(b, tinyCfg(), Options{Threads: 1}, 4, 128, 32, 20)
}

func BenchmarkTrain100M(b *testing.B) {
	benchTrain(b, model100M(), Options{Threads: 1}, 2, 256, 64, 3)
}

// BenchmarkTrain100MAutograd: the same step with ggml autograd's OUT_PROD for
// dX through frozen linears (the baseline the transposed backward replaces).
func BenchmarkTrain100MAutograd(b *testing.B) {
	benchTrain(b, model100M(), Options{Threads: 1, AutogradFrozenBackward: true}, 2, 256, 64, 3)
}

func BenchmarkTrain100MF16(b *testing.B) {
	c := model100M()
	c.DType = "f16"
	benchTrain(b, c, Options{Threads: 1}, 2, 256, 64, 3)
}

// BenchmarkTrain100MTransposeInGraph: no stored Wᵀ copies (F16 weights);
// each step transposes the frozen matrices inside the graph.
func BenchmarkTrain100MTransposeInGraph(b *testing.B) {
	c := model100M()
	c.DType = "f16"
	benchTrain(b, c, Options{Threads: 1, TransposeInGraph: true}, 2, 256, 64, 3)
}

// BenchmarkProfile100M prints where a training step of the 100M model
// (2×256 tokens, 64 trained per sequence, 1 thread) spends its time, per
// kind of ggml node (ProfileStep), F32 and F16.
func BenchmarkProfile100M(b *testing.B) {
	for _, dtype := range []string{"f32", "f16"} {
		b.Run(dtype, func(b *testing.B) {
			cfg := model100M()
			cfg.DType = dtype
			m := mustLoad(b, tinyModel(b, cfg), LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
			batch := benchBatch(rand.New(rand.NewPCG(1, 1)), m.Info().NVocab, 2, 256, 64)
			obj := DefaultObjective()
			if _, err := m.ForwardBackward(batch, obj, 0); err != nil { // warm-up
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				ops, _, err := m.ProfileStep(batch, obj, 0)
				if err != nil {
					b.Fatal(err)
				}
				logOpShares(b, ops)
			}
		})
	}
}

// BenchmarkQuantizedBases: one LoRA training step (ForwardBackward, 2×256
// tokens, 64 trained per sequence, 1 thread) of the 86M model as F32 and as
// the bases people download, made by llama.cpp's quantizer — Q8_0, Q4_0,
// Q4_K_M — side by side in one run (rounds alternate the types; the fastest
// of each is kept): step time, the file, the frozen weights the engine
// holds (quantized as stored) and their F16 Wᵀ copies, and the compute
// buffer.
func BenchmarkQuantizedBases(b *testing.B) {
	src := tinyModel(b, model100M())
	types := []string{"f32", "q8_0", "q4_0", "q4_k_m"}
	models := make([]*Model, len(types))
	files := make([]int64, len(types))
	for i, typ := range types {
		path := src
		if typ != "f32" {
			path, _ = quantizedBase(b, src, typ)
		}
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		files[i] = st.Size()
		m, err := Load(path, LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		models[i] = m
	}
	batch := benchBatch(rand.New(rand.NewPCG(1, 1)), models[0].Info().NVocab, 2, 256, 64)
	obj := DefaultObjective()
	best := make([]time.Duration, len(types))
	for i := range best {
		best[i] = time.Duration(math.MaxInt64)
	}
	for i := 0; i < b.N; i++ {
		for r := 0; r < 3; r++ {
			for k, m := range models {
				t0 := time.Now()
				if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
					b.Fatal(err)
				}
				best[k] = min(best[k], time.Since(t0))
			}
		}
	}
	const mib = 1 << 20
	for k, typ := range types {
		mem := models[k].MemoryBytes()
		b.ReportMetric(best[k].Seconds()*1e3, typ+"-ms/step")
		b.ReportMetric(float64(files[k])/mib, typ+"-file-MiB")
		b.ReportMetric(float64(mem.Weights-mem.Transposed)/mib, typ+"-weights-MiB")
		b.ReportMetric(float64(mem.Transposed)/mib, typ+"-Wt-MiB")
		b.ReportMetric(float64(mem.Compute)/mib, typ+"-compute-MiB")
	}
}

// BenchmarkForwardVsPrefill100M: the training graph's forward against
// llama.cpp's prefill on the same 86M model and sequences (2×256 tokens, 1
// thread), alternated round by round (fastest of each kept): the graph's
// forward as the training step and π_old use it (LogProbsAt, the last
// position of each sequence projected to the vocabulary, like llama.cpp's
// prefill that returns the last token's logits) and with every position
// projected (LogProbsBatch). FLOPs as forwardFLOPs (LoRA included on the
// graph's side).
func BenchmarkForwardVsPrefill100M(b *testing.B) {
	for _, dtype := range []string{"f32", "f16"} {
		b.Run(dtype, func(b *testing.B) {
			cfg := model100M()
			cfg.DType = dtype
			path := tinyModel(b, cfg)
			const B, T = 2, 256
			m, err := Load(path, LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			info := m.Info()
			rng := rand.New(rand.NewPCG(1, 1))
			seqs := make([][]int32, B)
			for i := range seqs {
				seqs[i] = randTokens(rng, T, info.NVocab)
			}
			last := tailMask(seqs, 1)
			lm, err := llama.LoadModel(path, llama.ModelParams{})
			if err != nil {
				b.Fatal(err)
			}
			defer lm.Close()
			lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: T, NBatch: T, Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer lctx.Close()
			runs := []func() error{
				func() error { _, err := m.LogProbsAt(seqs, last); return err },
				func() error { _, err := m.LogProbsBatch(seqs); return err },
				func() error {
					for _, s := range seqs {
						if _, err := lctx.Logits(s); err != nil {
							return err
						}
					}
					return nil
				},
			}
			best := []time.Duration{math.MaxInt64, math.MaxInt64, math.MaxInt64}
			for _, f := range runs { // warm-up
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for r := 0; r < 5; r++ {
					for k, f := range runs {
						t0 := time.Now()
						if err := f(); err != nil {
							b.Fatal(err)
						}
						best[k] = min(best[k], time.Since(t0))
					}
				}
			}
			fLast := forwardFLOPs(info, 8, B, T, B) / best[0].Seconds()
			fAll := forwardFLOPs(info, 8, B, T, B*(T-1)) / best[1].Seconds()
			fLlama := forwardFLOPs(info, 0, B, T, B) / best[2].Seconds()
			b.ReportMetric(fLast/1e9, "graph-fwd-GFLOP/s")
			b.ReportMetric(fAll/1e9, "graph-fwd-all-rows-GFLOP/s")
			b.ReportMetric(fLlama/1e9, "llama-prefill-GFLOP/s")
			b.ReportMetric(fLast/fLlama, "graph-fwd/llama-prefill")
			b.ReportMetric(fAll/fLlama, "graph-fwd-all-rows/llama-prefill")
		})
	}
}

// BenchmarkProfileForward100M prints where the graph's forward of the 86M
// model (2×256 tokens, every position projected, 1 thread) spends its
// time, per kind of ggml node (ProfileForward).
func BenchmarkProfileForward100M(b *testing.B) {
	for _, dtype := range []string{"f32", "f16"} {
		b.Run(dtype, func(b *testing.B) {
			cfg := model100M()
			cfg.DType = dtype
			m := mustLoad(b, tinyModel(b, cfg), LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
			rng := rand.New(rand.NewPCG(1, 1))
			seqs := [][]int32{randTokens(rng, 256, m.Info().NVocab), randTokens(rng, 256, m.Info().NVocab)}
			if _, err := m.LogProbsBatch(seqs); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				ops, err := m.ProfileForward(seqs)
				if err != nil {
					b.Fatal(err)
				}
				logOpShares(b, ops)
			}
		})
	}
}

// logOpShares logs every kind of node with ≥ 0.5 % of a profile's time and
// reports the profile's total.
func logOpShares(b *testing.B, ops []OpTime) {
	var total float64
	for _, o := range ops {
		total += o.Seconds
	}
	for _, o := range ops {
		if o.Seconds/total >= 0.005 {
			b.Logf("%-28s %4d nodes %8.1f ms %5.1f%%", o.Key, o.Count, o.Seconds*1e3, 100*o.Seconds/total)
		}
	}
	b.ReportMetric(total*1e3, "profiled-ms")
}
