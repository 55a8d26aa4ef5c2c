package gpucheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
)

// BenchConfig configures the benchmark: one process loads the model into
// llama.cpp (every layer offloaded when a GPU backend is loaded), times
// rollouts, then builds the training engine on the same weights
// (cgo.LoadShared, as `empo2 train` does) and times LoRA steps.
type BenchConfig struct {
	Model        string
	GPULayers    int // -1: all
	Threads      int
	Batches      []int // rollout batch sizes (sequences decoded together); nil: 1, 8, 64
	GenTokens    int   // tokens generated per sequence (0: 64)
	PromptTokens int   // random prompt tokens (0: 64)
	// TrainSeqs × TrainLen tokens per training step (0: 16 × 512); every
	// token after the first is trained.
	TrainSeqs, TrainLen int
	Rank                int // LoRA rank, all targets (0: 8)
	// MicroTokens caps the padded tokens of one training graph
	// (cgo.Options.MaxTokens; 0: the engine's default). A step over more
	// tokens runs as several graphs whose gradients add up.
	MicroTokens      int
	TransposeInGraph bool // cgo.Options.TransposeInGraph: no stored Wᵀ copies
	Steps            int  // timed training steps (0: 2; the first includes allocation)
	Seed             int64
}

// RolloutBench is one rollout batch size.
type RolloutBench struct {
	Batch     int     `json:"batch"`
	Tokens    int     `json:"tokens"` // generated: batch × GenTokens
	Seconds   float64 `json:"seconds"`
	TokPerSec float64 `json:"tok_per_s"`
}

// StepBench is one LoRA training step.
type StepBench struct {
	ForwardBackward float64 `json:"forward_backward_s"`
	AdamW           float64 `json:"adamw_s"`
	Seconds         float64 `json:"seconds"`
	TokPerSec       float64 `json:"tok_per_s"` // trained sequence tokens per second of the whole step
	GradNorm        float64 `json:"grad_norm"`
}

// BenchResult is the benchmark's document.
type BenchResult struct {
	Kind         string         `json:"kind"`
	Model        string         `json:"model"`
	Info         cgo.ModelInfo  `json:"info"`
	Params       uint64         `json:"params"`
	ModelBytes   uint64         `json:"model_bytes"`
	Devices      []llama.Device `json:"devices"`
	GPULayers    int            `json:"gpu_layers"`
	LoadSeconds  float64        `json:"load_s"` // llama.cpp model load (and offload)
	PromptTokens int            `json:"prompt_tokens"`
	GenTokens    int            `json:"gen_tokens"`
	Rollouts     []RolloutBench `json:"rollouts"`
	// Training: the engine built on the loaded weights, π_old recomputed
	// for the batch (one forward), then Steps steps.
	EngineSeconds    float64         `json:"engine_load_s"`
	TrainSeqs        int             `json:"train_seqs"`
	TrainLen         int             `json:"train_len"`
	Rank             int             `json:"rank"`
	TrainableParams  int             `json:"trainable_params"`
	MicroTokens      int             `json:"micro_tokens"`
	MicroBatches     int             `json:"micro_batches"` // graphs per step
	TransposeInGraph bool            `json:"transpose_in_graph"`
	OldLogpSeconds   float64         `json:"old_logp_s"`
	Steps            []StepBench     `json:"steps"`
	Stats            cgo.Stats       `json:"stats"` // the last step's loss and token counts (summed over its micro-batches)
	Memory           cgo.MemoryStats `json:"memory"`
	Seconds          float64         `json:"seconds"`
}

// Bench runs the benchmark; progress reports each part as it finishes (it
// may be nil), so that a run cut short still shows what it measured.
func Bench(ctx context.Context, cfg BenchConfig, progress func(*BenchResult)) (*BenchResult, error) {
	t0 := time.Now()
	if cfg.Batches == nil {
		cfg.Batches = []int{1, 8, 64}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.GenTokens, 64)
	def(&cfg.PromptTokens, 64)
	def(&cfg.TrainSeqs, 16)
	def(&cfg.TrainLen, 512)
	def(&cfg.Rank, 8)
	def(&cfg.Steps, 2)
	maxBatch := 0
	for _, b := range cfg.Batches {
		if b < 1 || b > 256 {
			return nil, fmt.Errorf("%w: rollout batch %d (want 1..256)", ErrConfig, b)
		}
		maxBatch = max(maxBatch, b)
	}
	if cfg.GenTokens < 1 || cfg.PromptTokens < 1 || cfg.TrainSeqs < 1 || cfg.TrainLen < 2 || cfg.Rank < 1 ||
		cfg.Steps < 1 || cfg.MicroTokens < 0 || cfg.Threads < 0 {
		return nil, fmt.Errorf("%w: %+v", ErrConfig, cfg)
	}
	report := func(r *BenchResult) {
		if progress != nil {
			progress(r)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x62656e6368))

	lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: cfg.GPULayers})
	if err != nil {
		return nil, err
	}
	defer lm.Close()
	info := lm.Info()
	res := &BenchResult{Kind: KindBench, Model: cfg.Model, Params: info.NParams, ModelBytes: info.SizeBytes,
		Devices: llama.Devices(), GPULayers: cfg.GPULayers, LoadSeconds: seconds(time.Since(t0)),
		PromptTokens: cfg.PromptTokens, GenTokens: cfg.GenTokens}
	report(res)

	// rollouts: one random prompt, batch sequences sampled from it
	prompt := make([]int32, cfg.PromptTokens)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(info.NVocab))
	}
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: cfg.PromptTokens + cfg.GenTokens + 8, NSeqMax: maxBatch,
		Threads: cfg.Threads, NoPrefixCache: true})
	if err != nil {
		return nil, err
	}
	defer lctx.Close()
	sp := llama.SampleParams{MaxTokens: cfg.GenTokens, Temperature: 1, Seed: uint64(cfg.Seed), IgnoreEOG: true}
	warm := sp
	warm.N, warm.MaxTokens = 1, min(4, cfg.GenTokens)
	if _, err := lctx.Generate(ctx, prompt, warm); err != nil { // first use: kernels, buffers
		return nil, err
	}
	for _, b := range cfg.Batches {
		p := sp
		p.N = b
		t1 := time.Now()
		out, err := lctx.Generate(ctx, prompt, p)
		if err != nil {
			return nil, fmt.Errorf("rollout batch %d: %w", b, err)
		}
		d := time.Since(t1)
		n := 0
		for _, s := range out {
			n += len(s.Tokens)
		}
		res.Rollouts = append(res.Rollouts, RolloutBench{Batch: b, Tokens: n, Seconds: seconds(d), TokPerSec: float64(n) / d.Seconds()})
		report(res)
	}

	// training on the same weights
	t2 := time.Now()
	m, err := cgo.LoadShared(lm, cgo.LoRAConfig{Rank: cfg.Rank, Alpha: float32(2 * cfg.Rank), Seed: cfg.Seed},
		cgo.Options{Threads: cfg.Threads, MaxTokens: cfg.MicroTokens, TransposeInGraph: cfg.TransposeInGraph})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	res.Info, res.EngineSeconds = m.Info(), seconds(time.Since(t2))
	res.TrainSeqs, res.TrainLen, res.Rank, res.MicroTokens, res.TransposeInGraph = cfg.TrainSeqs, cfg.TrainLen, cfg.Rank, cfg.MicroTokens, cfg.TransposeInGraph
	for _, p := range m.Params() {
		res.TrainableParams += p.Shape[0] * p.Shape[1]
	}
	toks := make([][]int32, cfg.TrainSeqs)
	for i := range toks {
		toks[i] = make([]int32, cfg.TrainLen)
		for t := range toks[i] {
			toks[i][t] = int32(rng.IntN(info.NVocab))
		}
	}
	t3 := time.Now()
	old, err := m.LogProbsBatch(toks)
	if err != nil {
		return nil, err
	}
	res.OldLogpSeconds = seconds(time.Since(t3))
	report(res)
	batch := make([]cgo.Sequence, len(toks))
	for i, tk := range toks {
		s := cgo.Sequence{Tokens: tk, Trained: make([]bool, len(tk)), OldLogp: old[i], Advantage: make([]float32, len(tk))}
		a := float32(1)
		if i%2 == 1 {
			a = -1
		}
		for t := 1; t < len(tk); t++ {
			s.Trained[t], s.Advantage[t] = true, a
		}
		batch[i] = s
	}
	obj := cgo.DefaultObjective()
	// micro-batches of whole sequences within MicroTokens, each adding its
	// share of the mini-batch's token-mean gradient (as the trainer does)
	per := len(batch)
	if cfg.MicroTokens > 0 {
		per = max(1, cfg.MicroTokens/cfg.TrainLen)
	}
	trained, _ := cgo.CountTrained(batch)
	res.MicroBatches = (len(batch) + per - 1) / per
	for step := 1; step <= cfg.Steps; step++ {
		if err := m.ZeroGrads(); err != nil {
			return nil, err
		}
		t4 := time.Now()
		var st cgo.Stats
		for lo := 0; lo < len(batch); lo += per {
			s, err := m.ForwardBackward(batch[lo:min(lo+per, len(batch))], obj, 1/float32(trained))
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			st.Loss += s.Loss
			st.Tokens += s.Tokens
			st.PaddedTokens += s.PaddedTokens
		}
		t5 := time.Now()
		norm, _, err := m.AdamWStep(cgo.AdamWParams{LR: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: int64(step), MaxGradNorm: 1})
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		t6 := time.Now()
		res.Stats = st
		res.Steps = append(res.Steps, StepBench{ForwardBackward: seconds(t5.Sub(t4)), AdamW: seconds(t6.Sub(t5)),
			Seconds: seconds(t6.Sub(t4)), TokPerSec: float64(cfg.TrainSeqs*cfg.TrainLen) / t6.Sub(t4).Seconds(), GradNorm: norm})
		res.Memory = m.MemoryBytes()
		report(res)
	}
	res.Seconds = seconds(time.Since(t0))
	return res, nil
}
