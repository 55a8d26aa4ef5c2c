package llama

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/empo2/empo2/llama/internal/cbench"
	"github.com/empo2/empo2/modelgen"
)

// benchThreads: one thread, because the development machine's 2 cores are
// shared by several processes and ggml's spinning barrier collapses when a
// worker thread is descheduled (2 threads measured ~1000x slower there).
const benchThreads = 1

var (
	model100MOnce sync.Once
	model100MPath string
	model100MErr  error
)

// model100M generates (once per test binary) the ~86M-parameter model of
// the benchmark: 12 layers, hidden 768, 12 heads, 2 KV heads, FFN 2048,
// vocab 8192, F32.
func model100M(b *testing.B) string {
	model100MOnce.Do(func() {
		cfg := modelgen.DefaultConfig()
		cfg.Layers, cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.FFN, cfg.Vocab, cfg.Ctx = 12, 768, 12, 2, 2048, 8192, 1024
		model100MPath = filepath.Join(testDir, "m100.gguf")
		model100MErr = modelgen.Write(model100MPath, cfg)
	})
	if model100MErr != nil {
		b.Fatal(model100MErr)
	}
	return model100MPath
}

// BenchmarkGenerate compares generation throughput of Context.Generate
// (Go sampling plus raw-model log-probs of every token) with a plain C loop
// over llama.h using llama.cpp's sampler chain, on the same llama_context,
// prompt and settings (temperature 1, no truncation: the RL setting). Runs
// alternate Go/C reps times and keep each side's best, because the machine
// is shared. Metrics: go_tok/s, c_tok/s and ratio = go/c (target >= 0.95).
func BenchmarkGenerate(b *testing.B) {
	for _, mc := range []struct {
		name       string
		path       func(*testing.B) string
		nGen, reps int
	}{
		{"tiny", func(*testing.B) string { return tinyPath }, 128, 41},
		{"100M", model100M, 16, 9},
	} {
		for _, nSeq := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/batch%d", mc.name, nSeq), func(b *testing.B) {
				m, err := LoadModel(mc.path(b), ModelParams{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				c, err := NewContext(m, ContextParams{NCtx: 256, NSeqMax: 8, Threads: benchThreads, NoPrefixCache: true}) // the C loop prefills every run
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				prompt := testPrompt(b, m)
				p := SampleParams{N: nSeq, MaxTokens: mc.nGen, Temperature: 1, Seed: 1, IgnoreEOG: true}
				cp := cbench.Params{NSeq: nSeq, NGen: mc.nGen, Temperature: 1, Seed: 1}
				runGo := func() time.Duration {
					start := time.Now()
					seqs, err := c.Generate(context.Background(), prompt, p)
					if err != nil {
						b.Fatal(err)
					}
					if len(seqs[nSeq-1].Tokens) != mc.nGen {
						b.Fatalf("generated %d tokens", len(seqs[nSeq-1].Tokens))
					}
					return time.Since(start)
				}
				runC := func() time.Duration {
					c.mu.Lock()
					defer c.mu.Unlock()
					d, err := cbench.Generate(unsafe.Pointer(c.c), prompt, cp)
					if err != nil {
						b.Fatal(err)
					}
					return d
				}
				runGo() // warm-up
				runC()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bestGo, bestC := time.Duration(1<<62), time.Duration(1<<62)
					for r := 0; r < mc.reps; r++ {
						// alternate which side runs first
						if r%2 == 0 {
							bestC = min(bestC, runC())
							bestGo = min(bestGo, runGo())
						} else {
							bestGo = min(bestGo, runGo())
							bestC = min(bestC, runC())
						}
					}
					toks := float64(nSeq * mc.nGen)
					goTPS, cTPS := toks/bestGo.Seconds(), toks/bestC.Seconds()
					b.ReportMetric(goTPS, "go_tok/s")
					b.ReportMetric(cTPS, "c_tok/s")
					b.ReportMetric(goTPS/cTPS, "ratio")
				}
			})
		}
	}
}
