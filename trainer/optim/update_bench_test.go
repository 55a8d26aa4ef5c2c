package optim

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

// benchUpdate measures a whole update as the training loop runs it —
// forward + backward (cgo.ForwardBackward) + gradient clipping + AdamW step +
// writing the parameters back + pushing them into the rollout side's loaded
// llama.cpp adapter — beside ForwardBackward alone, alternating the two in
// the same run. B sequences of T tokens, the last respLen of each trained;
// rank 8 on all targets; 1 thread.
func benchUpdate(b *testing.B, cfg modelgen.Config, B, T, respLen, rounds int) {
	defer zerolog.SetGlobalLevel(zerolog.GlobalLevel())
	zerolog.SetGlobalLevel(zerolog.WarnLevel) // llama.cpp's loader logs at debug
	path := filepath.Join(b.TempDir(), "m.gguf")
	if err := modelgen.Write(path, cfg); err != nil {
		b.Fatal(err)
	}
	pol, err := cgo.Load(path, cgo.LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, testutil.CgoOptions)
	if err != nil {
		b.Fatal(err)
	}
	defer pol.Close()
	ucfg := Config{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: ScheduleConstant, BaseLR: 1e-4}, MaxGradNorm: 1, Objective: cgo.DefaultObjective(), MicroBatch: B}
	u, err := NewUpdater(pol, ucfg)
	if err != nil {
		b.Fatal(err)
	}
	a, err := u.Adapter()
	if err != nil {
		b.Fatal(err)
	}
	adapterPath := filepath.Join(b.TempDir(), "adapter.gguf")
	if err := a.Write(adapterPath, gguf.TypeF32); err != nil {
		b.Fatal(err)
	}
	lm, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	la, err := lm.LoadAdapter(adapterPath)
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	u.Sinks = []TensorSink{la}

	rng := rand.New(rand.NewPCG(1, 2))
	batch := make([]cgo.Sequence, B)
	for i := range batch {
		s := cgo.Sequence{Tokens: make([]int32, T), Trained: make([]bool, T), OldLogp: make([]float32, T), Advantage: make([]float32, T)}
		for t := range s.Tokens {
			s.Tokens[t] = int32(rng.IntN(cfg.Vocab - 3)) // no special tokens
		}
		for t := T - respLen; t < T; t++ {
			s.Trained[t], s.OldLogp[t], s.Advantage[t] = true, -4, float32(rng.NormFloat64())
		}
		batch[i] = s
	}
	if _, err := u.Update(batch); err != nil { // warm-up: allocates the compute buffers
		b.Fatal(err)
	}
	var upd, fb time.Duration
	for range rounds {
		t0 := time.Now()
		if _, err := u.Update(batch); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		_ = pol.ZeroGrads()
		if _, err := pol.ForwardBackward(batch, ucfg.Objective, 0); err != nil {
			b.Fatal(err)
		}
		_ = pol.ZeroGrads()
		upd += t1.Sub(t0)
		fb += time.Since(t1)
	}
	n := float64(rounds)
	b.ReportMetric(upd.Seconds()*1e3/n, "ms/update")
	b.ReportMetric(float64(B*T)*n/upd.Seconds(), "update-tok/s")
	b.ReportMetric(float64(B*respLen)*n/upd.Seconds(), "trained-tok/s")
	b.ReportMetric(fb.Seconds()/upd.Seconds(), "fwd-bwd-share")
}

func BenchmarkUpdateTiny(b *testing.B) {
	benchUpdate(b, modelgen.DefaultConfig(), 4, 128, 32, 20)
}

// BenchmarkUpdate100M: the ~86M-parameter generated model of the other
// benchmarks (12 layers, hidden 768, GQA 12/2, FFN 2048, vocab 8192, F32).
func BenchmarkUpdate100M(b *testing.B) {
	cfg := modelgen.DefaultConfig()
	cfg.Layers, cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.FFN, cfg.Vocab, cfg.Ctx = 12, 768, 12, 2, 2048, 8192, 512
	benchUpdate(b, cfg, 2, 256, 64, 2)
}
