package llama

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/llama/internal/cbench"
	"github.com/empo2/empo2/modelgen"
)

// The rollout benchmark (`make bench-rollout`, issue 40): empo2's sampling
// loop against llama.cpp's own, with Qwen's real 152k vocabulary.
//
// Model: the qwen2.5-0.5b preset's shape (hidden 896, 14 heads, 2 KV heads,
// FFN 4864, vocabulary 151,936 — the real Qwen tokenizer, padded —, tied
// embeddings) with 2 layers instead of 24 (EMPO2_BENCH_LAYERS overrides),
// F16, random weights: the head's 136M multiply-adds per token and the
// vocabulary are the real ones, the body is cut so that the benchmark runs
// in minutes on two shared cores. Every side runs on the same llama_context
// (one thread), the same prompt and batch, temperature 1 (the RL setting),
// EOG ignored so every sequence is full length:
//
//   - empo2:  Context.Generate, N sequences (prefill once, KV copied, one
//     token per sequence per llama_decode, sampleLoop: the loop GenerateSlots
//     runs for rollouts), the raw log-prob of every token;
//   - llama:  a C loop over llama.h with llama.cpp's sampler chain (temp +
//     dist), the same prefill and copies;
//   - roof:   the same C loop with no sampling: every next token a fixed id
//     (the decoder's own pace, logits still computed).
//
// Metrics per batch: tok/s of each, ratio = empo2 / llama (goal >= 0.95)
// and roof_ratio = empo2 / roof; the host cost per sampled row of the
// sampler before (the Go reference, sampler_test.go's sampleRef) and now.
// Sides alternate and each keeps its best of reps runs (the machine is
// shared).

var (
	rolloutModelOnce sync.Once
	rolloutModelPath string
	rolloutModelErr  error
)

func rolloutModel(b *testing.B) string {
	dir := qwentok.Dir(b)
	rolloutModelOnce.Do(func() {
		tok, err := modelgen.LoadHFTokenizer(dir)
		if err != nil {
			rolloutModelErr = err
			return
		}
		pr, _ := modelgen.LookupPreset("qwen2.5-0.5b")
		cfg := pr.Config
		cfg.Layers = 2
		if v := os.Getenv("EMPO2_BENCH_LAYERS"); v != "" {
			if _, err := fmt.Sscan(v, &cfg.Layers); err != nil {
				rolloutModelErr = fmt.Errorf("EMPO2_BENCH_LAYERS %q: %w", v, err)
				return
			}
		}
		cfg.Ctx, cfg.DType, cfg.HFTokenizer = 512, "f16", tok
		rolloutModelPath = filepath.Join(testDir, "rollout-0.5b.gguf")
		start := time.Now()
		rolloutModelErr = modelgen.Write(rolloutModelPath, cfg)
		b.Logf("model: qwen2.5-0.5b shape, %d layers, vocab %d, f16, written in %v", cfg.Layers, cfg.Vocab, time.Since(start).Round(time.Millisecond))
	})
	if rolloutModelErr != nil {
		b.Fatal(rolloutModelErr)
	}
	return rolloutModelPath
}

func BenchmarkRollout(b *testing.B) {
	path := rolloutModel(b)
	m, err := LoadModel(path, ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prompt, err := m.Tokenize("You are in the kitchen. You see a stove, a pot of water and a closed door. Your task: boil the water.", false, true)
	if err != nil {
		b.Fatal(err)
	}
	V := m.NVocab()
	for _, bc := range []struct{ batch, nGen, reps int }{{1, 32, 5}, {8, 16, 3}, {64, 6, 3}} {
		b.Run(fmt.Sprintf("batch%d", bc.batch), func(b *testing.B) {
			c, err := NewContext(m, ContextParams{NCtx: 64, NSeqMax: bc.batch, Threads: benchThreads, NoPrefixCache: true})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			p := SampleParams{N: bc.batch, MaxTokens: bc.nGen, Temperature: 1, Seed: 1, IgnoreEOG: true}
			runGo := func() time.Duration {
				start := time.Now()
				seqs, err := c.Generate(context.Background(), prompt, p)
				if err != nil {
					b.Fatal(err)
				}
				if len(seqs[bc.batch-1].Tokens) != bc.nGen {
					b.Fatalf("generated %d tokens", len(seqs[bc.batch-1].Tokens))
				}
				return time.Since(start)
			}
			runC := func(decodeOnly bool) time.Duration {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.kvValid, c.slots = false, nil // the C loop clears the KV cache
				d, err := cbench.Generate(unsafe.Pointer(c.c), prompt, cbench.Params{NSeq: bc.batch, NGen: bc.nGen, Temperature: 1, Seed: 1,
					DecodeOnly: decodeOnly, Fixed: prompt[0]})
				if err != nil {
					b.Fatal(err)
				}
				return d
			}
			runGo() // warm-up
			runC(false)
			runC(true)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				best := [3]time.Duration{1 << 62, 1 << 62, 1 << 62}
				for r := 0; r < bc.reps; r++ {
					sides := []func() time.Duration{runGo, func() time.Duration { return runC(false) }, func() time.Duration { return runC(true) }}
					for j := range sides {
						k := (j + r) % 3 // rotate which side runs first
						best[k] = min(best[k], sides[k]())
					}
				}
				toks := float64(bc.batch * bc.nGen)
				goTPS, cTPS, roofTPS := toks/best[0].Seconds(), toks/best[1].Seconds(), toks/best[2].Seconds()
				b.ReportMetric(goTPS, "empo2_tok/s")
				b.ReportMetric(cTPS, "llama_tok/s")
				b.ReportMetric(roofTPS, "roof_tok/s")
				b.ReportMetric(goTPS/cTPS, "ratio")
				b.ReportMetric(goTPS/roofTPS, "roof_ratio")
				// where the host time goes, per generated token: decode (the
				// roof), the rest of llama.cpp's loop (its sampler) and of
				// empo2's (sampling + bookkeeping)
				b.ReportMetric(best[2].Seconds()*1e3/toks, "decode_ms/tok")
				b.ReportMetric((best[1]-best[2]).Seconds()*1e3/toks, "llama_sampler_ms/tok")
				b.ReportMetric((best[0]-best[2]).Seconds()*1e3/toks, "empo2_host_ms/tok")
			}
		})
	}
	// the sampler alone on one 152k row: before (the Go sampler) and now
	b.Run("sampler_row", func(b *testing.B) {
		logits := make([]float32, V)
		for i := range logits {
			logits[i] = float32(i%977) / 300
		}
		s := newSampler(SampleParams{Temperature: 1, Seed: 3}, 0)
		pre := make([]float64, V)
		ref := newSampler(SampleParams{Temperature: 1, Seed: 3}, 0).rng
		for i := 0; i < b.N; i++ {
			const n = 50
			start := time.Now()
			for j := 0; j < n; j++ {
				sampleRef(ref, logits, 1)
			}
			goRow := time.Since(start) / n
			start = time.Now()
			for j := 0; j < n; j++ {
				if _, _, err := s.sample(logits, pre); err != nil {
					b.Fatal(err)
				}
			}
			cRow := time.Since(start) / n
			b.ReportMetric(float64(goRow.Microseconds()), "before_us/row")
			b.ReportMetric(float64(cRow.Microseconds()), "now_us/row")
		}
	})
}
