package cgo

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/empo2/empo2/llama"
)

// procStatus is a "<field>: N kB" line of /proc/self/status, in bytes.
func procStatus(t testing.TB, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no " + field)
	return 0
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t testing.TB) int64 { return procStatus(t, "VmHWM") }

// vmRSS is the process's resident set now (VmRSS), in bytes.
func vmRSS(t testing.TB) int64 { return procStatus(t, "VmRSS") }

// TestRSSChild is the child process of BenchmarkRSS (skipped otherwise):
// EMPO2_RSS_MODE = rollout (llama.cpp model + context + one 256-token
// prefill), shared (rollout + LoadShared + one training step + AdamW) or own
// (rollout + Load, the training engine's own copy of the weights, + the same
// step). It prints "RSS <peak bytes> <transposed> <compute> <params>".
func TestRSSChild(t *testing.T) {
	mode, path := os.Getenv("EMPO2_RSS_MODE"), os.Getenv("EMPO2_RSS_MODEL")
	if mode == "" || path == "" {
		t.Skip("child of BenchmarkRSS")
	}
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	lc, err := llama.NewContext(lm, llama.ContextParams{NCtx: 512, NBatch: 256, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	V := lm.Info().NVocab
	batch := benchBatch(rng, V, 2, 256, 64)
	if _, err := lc.Logits(batch[0].Tokens); err != nil {
		t.Fatal(err)
	}
	var mem MemoryStats
	if mode != "rollout" {
		lora := LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}
		var m *Model
		if mode == "shared" {
			m, err = LoadShared(lm, lora, Options{Threads: 1})
		} else {
			m, err = Load(path, lora, Options{Threads: 1})
		}
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		obj := DefaultObjective()
		if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.AdamWStep(AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}); err != nil {
			t.Fatal(err)
		}
		// the rollout side decodes again with the training engine alive
		if _, err := lc.Logits(batch[1].Tokens); err != nil {
			t.Fatal(err)
		}
		mem = m.MemoryBytes()
	}
	fmt.Printf("RSS %d %d %d %d\n", peakRSS(t), mem.Transposed, mem.Compute, mem.Params)
}

// BenchmarkRSS measures, on the 86M generated model (12 layers, C 768,
// H 12/2, F 2048, V 8192; F32 and F16), the peak RSS of three processes:
// rollout alone, rollout + training engine on llama.cpp's weights
// (LoadShared), rollout + training engine with its own copy (Load). Target:
// shared − rollout ≤ 1.1 × (transposed copies + compute buffer + LoRA
// params/grads/moments), i.e. the training engine adds no second copy of
// the base weights.
func BenchmarkRSS(b *testing.B) {
	for _, dtype := range []string{"f32", "f16"} {
		b.Run(dtype, func(b *testing.B) {
			cfg := model100M()
			cfg.DType = dtype
			path := tinyModel(b, cfg)
			run := func(mode string) []int64 {
				cmd := exec.Command(os.Args[0], "-test.run=^TestRSSChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), "EMPO2_RSS_MODE="+mode, "EMPO2_RSS_MODEL="+path)
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("%s: %v\n%s", mode, err, out)
				}
				for _, line := range bytes.Split(out, []byte("\n")) {
					if f := strings.Fields(string(line)); len(f) == 5 && f[0] == "RSS" {
						v := make([]int64, 4)
						for i := range v {
							v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
						}
						return v
					}
				}
				b.Fatalf("%s: no RSS line in\n%s", mode, out)
				return nil
			}
			for i := 0; i < b.N; i++ {
				ro, sh, own := run("rollout"), run("shared"), run("own")
				const mib = 1 << 20
				extra := sh[1] + sh[2] + sh[3]
				b.ReportMetric(float64(ro[0])/mib, "rollout-MiB")
				b.ReportMetric(float64(sh[0])/mib, "rollout+shared-MiB")
				b.ReportMetric(float64(own[0])/mib, "rollout+own-copy-MiB")
				b.ReportMetric(float64(extra)/mib, "transposed+compute+params-MiB")
				b.ReportMetric(float64(sh[0]-ro[0])/float64(extra), "shared-extra/(transposed+compute+params)")
			}
		})
	}
}

// TestRSSLongChild is the child process of BenchmarkRSSLongPrompts (skipped
// otherwise): the calls one update of `empo2 train` makes, with its default
// micro-batch of 8 sequences, on the tiny model (2 layers, C 64, vocab 512,
// context 2048) and sequences of ScienceWorld length (1900–2040 tokens, 16
// trained response tokens at the end of each of several turns): a rollout
// context of 2048 tokens decodes a prompt, π_old of the off-policy
// behaviour sequences (LogProbsBatch), π_old of the training sequences
// (TrainedLogProbs), ForwardBackward per micro-batch, AdamW; then the
// rollout side decodes again. It prints
// "RSS <peak> <held after the update> <largest compute buffer>".
func TestRSSLongChild(t *testing.T) {
	path := os.Getenv("EMPO2_RSS_LONG_MODEL")
	if path == "" {
		t.Skip("child of BenchmarkRSSLongPrompts")
	}
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	lc, err := llama.NewContext(lm, llama.ContextParams{NCtx: 2048, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	V := lm.Info().NVocab
	const B = 8
	batch := make([]Sequence, B)
	seqs := make([][]int32, B)
	for b := range batch {
		L := 1900 + rng.IntN(140)
		s := Sequence{Tokens: randTokens(rng, L, V), Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L)}
		for turn := 0; turn < 8; turn++ { // 8 responses of 16 tokens spread over the episode
			end := L - turn*L/8
			for t := end - 16; t < end; t++ {
				s.Trained[t], s.OldLogp[t], s.Advantage[t] = true, -6, float32(b%2)*2-1
			}
		}
		batch[b], seqs[b] = s, s.Tokens
	}
	if _, err := lc.Logits(seqs[0][:1024]); err != nil {
		t.Fatal(err)
	}
	m, err := LoadShared(lm, LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	obj := DefaultObjective()
	if _, err := m.LogProbsBatch(seqs); err != nil {
		t.Fatal(err)
	}
	old, err := m.TrainedLogProbs(batch, obj)
	if err != nil {
		t.Fatal(err)
	}
	for b := range batch {
		copy(batch[b].OldLogp, old[b])
	}
	if _, err := m.ForwardBackward(batch, obj, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.AdamWStep(AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Logits(seqs[1][:1024]); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	debug.FreeOSMemory()
	fmt.Printf("RSS %d %d %d\n", peakRSS(t), vmRSS(t), m.MemoryBytes().Compute)
}

// BenchmarkRSSLongPrompts: peak and held RSS of TestRSSLongChild's process
// (the update of a tiny model on 8 sequences of ~2000 tokens), and the
// largest compute buffer of its graphs.
func BenchmarkRSSLongPrompts(b *testing.B) {
	cfg := tinyCfg()
	cfg.Ctx = 2048
	path := tinyModel(b, cfg)
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRSSLongChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EMPO2_RSS_LONG_MODEL="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		var peak, held, compute int64
		for _, line := range bytes.Split(out, []byte("\n")) {
			if f := strings.Fields(string(line)); len(f) == 4 && f[0] == "RSS" {
				peak, _ = strconv.ParseInt(f[1], 10, 64)
				held, _ = strconv.ParseInt(f[2], 10, 64)
				compute, _ = strconv.ParseInt(f[3], 10, 64)
			}
		}
		if peak == 0 {
			b.Fatalf("no RSS line in\n%s", out)
		}
		const mib = 1 << 20
		b.ReportMetric(float64(peak)/mib, "peak-RSS-MiB")
		b.ReportMetric(float64(held)/mib, "held-RSS-MiB")
		b.ReportMetric(float64(compute)/mib, "compute-MiB")
	}
}
