package gpucheck

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/empo2/empo2/llama"
)

// DefaultPrompts are the rollout check's prompts: different lengths, so that
// the batched decode pads and masks.
var DefaultPrompts = []string{
	"go to the kitchen",
	"You are in the hallway. The door to the kitchen is closed. You see a stove and a pot of water.",
	"open the door",
	"Heat the water on the stove, then focus on the steam.",
}

// RolloutConfig configures the rollout check.
type RolloutConfig struct {
	Model     string
	GPULayers int // llama.cpp layers offloaded (-1: all); 0 for the CPU reference
	Threads   int
	Prompts   []string // nil: DefaultPrompts
	MaxTokens int      // generated per prompt (0: 24); EOG tokens are ignored so every sequence is full length
	// NoiseModel, when set, is a model with the same weights in higher
	// precision (the F32 twin of an F16 model): the greedy sequences are
	// scored on it and the largest |Δ log-prob| is the noise floor, the
	// effect of the model's own rounding, which a device run of the lower
	// precision model is then held to.
	NoiseModel string
	// Reference: a RolloutResult written by another run (the CPU); when
	// set, this run's sequences are compared with it.
	Reference *RolloutResult
	Tol       float64 // |Δ log-prob| allowed against the reference (0: 1e-3; a reference noise floor replaces it)
	// KVType and FlashAttn are llama.ContextParams' ("": its defaults, an
	// F32 cache and no flash attention): the attention variants the GPU
	// check runs to find where the device's log-probs part from the CPU's.
	KVType, FlashAttn string
}

// GenSeq is one greedy sequence.
type GenSeq struct {
	Prompt   int       `json:"prompt"`
	Tokens   []int32   `json:"tokens"`
	LogProbs []float32 `json:"logprobs"`
}

// Mismatch is the first token where two greedy sequences part.
type Mismatch struct {
	Prompt  int   `json:"prompt"`
	Batched bool  `json:"batched"`
	Pos     int   `json:"pos"`
	Want    int32 `json:"want"` // the reference's token
	Got     int32 `json:"got"`
	// Margin: log p(got) − log p(want) at that position under this run's
	// model (greedy picked got, so ≥ 0 up to rounding). A margin within the
	// tolerance is a near tie that rounding may flip: the sequences are
	// compared up to it and the flip is not a failure.
	Margin jsonFloat `json:"margin"`
	Tie    bool      `json:"tie"`
}

// Agreement compares two sets of greedy sequences.
type Agreement struct {
	Sequences  int        `json:"sequences"`
	Tokens     int        `json:"tokens_compared"`
	Mismatches []Mismatch `json:"mismatches,omitempty"`
	MaxAbsLogp jsonFloat  `json:"max_abs_logprob_diff"`
	Tol        float64    `json:"tol"`
	TolSource  string     `json:"tol_source"`
	Pass       bool       `json:"pass"`
}

// RolloutResult is the rollout check's document.
type RolloutResult struct {
	Kind      string         `json:"kind"`
	Model     string         `json:"model"`
	Arch      string         `json:"arch"`
	GPULayers int            `json:"gpu_layers"`
	Devices   []llama.Device `json:"devices"`
	MaxTokens int            `json:"max_tokens"`
	KVType    string         `json:"kv_type"`    // the KV cache's element type
	FlashAttn string         `json:"flash_attn"` // llama.cpp's flash attention: off, on, auto
	Single    []GenSeq       `json:"single"`
	Batched   []GenSeq       `json:"batched"`
	// BatchedVsSingle: the batch's sequences against the single ones of the
	// same run, held to 1e-4 (the llama package's own bound for batching).
	BatchedVsSingle Agreement  `json:"batched_vs_single"`
	NoiseFloor      *float64   `json:"noise_floor,omitempty"`
	NoiseModel      string     `json:"noise_model,omitempty"`
	Reference       *Agreement `json:"reference,omitempty"`
	Seconds         float64    `json:"seconds"`
	Pass            bool       `json:"pass"`
}

// batchTol bounds batched against single decoding in one run: the llama
// package's tests hold generation log-probs to teacher-forced scoring within
// 1e-4 on the CPU.
const batchTol = 1e-4

// Rollouts runs the check. The result is returned even when it fails
// (ErrMismatch).
func Rollouts(ctx context.Context, cfg RolloutConfig) (*RolloutResult, error) {
	t0 := time.Now()
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 24
	}
	if cfg.Tol == 0 {
		cfg.Tol = 1e-3
	}
	if cfg.MaxTokens < 1 || cfg.Tol < 0 || cfg.Threads < 0 {
		return nil, fmt.Errorf("%w: max tokens %d, tol %v, threads %d", ErrConfig, cfg.MaxTokens, cfg.Tol, cfg.Threads)
	}
	prompts := cfg.Prompts
	if len(prompts) == 0 {
		prompts = DefaultPrompts
	}
	lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: cfg.GPULayers})
	if err != nil {
		return nil, err
	}
	defer lm.Close()
	toks := make([][]int32, len(prompts))
	longest := 0
	for i, p := range prompts {
		if toks[i], err = lm.Tokenize(p, true, false); err != nil {
			return nil, err
		}
		longest = max(longest, len(toks[i]))
	}
	// a multiple of llama.cpp's 256-cell padding, so that it keeps it as is
	nctx := (longest + cfg.MaxTokens + 8 + 255) / 256 * 256
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: nctx, NSeqMax: len(prompts),
		Threads: cfg.Threads, NoPrefixCache: true, KVType: cfg.KVType, FlashAttn: cfg.FlashAttn})
	if err != nil {
		return nil, err
	}
	defer lctx.Close()
	sp := llama.SampleParams{N: 1, MaxTokens: cfg.MaxTokens, Temperature: 0, IgnoreEOG: true}
	res := &RolloutResult{Kind: KindRollout, Model: cfg.Model, Arch: lm.Info().Arch, GPULayers: cfg.GPULayers,
		Devices: llama.Devices(), MaxTokens: cfg.MaxTokens, KVType: cmp.Or(cfg.KVType, "f32"), FlashAttn: cmp.Or(cfg.FlashAttn, "off")}
	for i, p := range toks {
		s, err := lctx.Generate(ctx, p, sp)
		if err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
		res.Single = append(res.Single, GenSeq{i, s[0].Tokens, s[0].LogProbs})
	}
	many, err := lctx.GenerateMany(ctx, toks, sp)
	if err != nil {
		return nil, err
	}
	for i, s := range many {
		res.Batched = append(res.Batched, GenSeq{i, s[0].Tokens, s[0].LogProbs})
	}
	margin := func(prompt int, prefix []int32, want, got int32) float64 {
		return tokenMargin(ctx, lctx, toks[prompt], prefix, want, got)
	}
	if cfg.NoiseModel != "" {
		floor, err := noiseFloor(ctx, cfg, nctx, toks, res.Single)
		if err != nil {
			return nil, fmt.Errorf("noise floor: %w", err)
		}
		res.NoiseFloor, res.NoiseModel = &floor, cfg.NoiseModel
	}
	// Batched and single decoding take different kernels (matrix-matrix
	// against matrix-vector products); in F16 both round activations to
	// half precision, so the noise floor bounds them where there is one.
	btol, bsrc := batchTol, "batched vs single, same run"
	floor, floorModel := res.NoiseFloor, res.NoiseModel
	if floor == nil && cfg.Reference != nil {
		floor, floorModel = cfg.Reference.NoiseFloor, cfg.Reference.NoiseModel
	}
	if floor != nil && *floor > btol {
		btol, bsrc = *floor, "batched vs single, same run; noise floor ("+filepath.Base(floorModel)+")"
	}
	res.BatchedVsSingle = compareSeqs(res.Single, res.Batched, true, btol, bsrc, margin)
	res.Pass = res.BatchedVsSingle.Pass
	if ref := cfg.Reference; ref != nil {
		if len(ref.Single) != len(res.Single) || ref.MaxTokens != res.MaxTokens {
			return nil, fmt.Errorf("%w: the reference has %d prompts of %d tokens, this run %d of %d (same prompts and --max-tokens needed)",
				ErrConfig, len(ref.Single), ref.MaxTokens, len(res.Single), res.MaxTokens)
		}
		tol, src := cfg.Tol, "fixed"
		if ref.NoiseFloor != nil {
			tol, src = *ref.NoiseFloor, "the reference's noise floor ("+filepath.Base(ref.NoiseModel)+")"
		}
		a := compareSeqs(ref.Single, res.Single, false, tol, src, margin)
		b := compareSeqs(ref.Batched, res.Batched, true, tol, src, margin)
		a.Sequences += b.Sequences
		a.Tokens += b.Tokens
		a.Mismatches = append(a.Mismatches, b.Mismatches...)
		a.MaxAbsLogp = jsonFloat(math.Max(float64(a.MaxAbsLogp), float64(b.MaxAbsLogp)))
		a.Pass = a.Pass && b.Pass
		res.Reference = &a
		res.Pass = res.Pass && a.Pass
	}
	res.Seconds = seconds(time.Since(t0))
	if !res.Pass {
		return res, ErrMismatch
	}
	return res, nil
}

// compareSeqs compares got with ref sequence by sequence: tokens equal up to
// the first difference, log-probs within tol up to there. A difference is a
// near tie (not a failure) when got's token beats ref's by at most tol
// under this run's model (margin).
func compareSeqs(ref, got []GenSeq, batched bool, tol float64, src string,
	margin func(prompt int, prefix []int32, want, got int32) float64) Agreement {
	a := Agreement{Sequences: len(ref), Tol: tol, TolSource: src, Pass: len(ref) == len(got)}
	worst := 0.0
	for i := range ref {
		if i >= len(got) {
			break
		}
		r, g := ref[i], got[i]
		n := min(len(r.Tokens), len(g.Tokens))
		same := n
		for t := 0; t < n; t++ {
			if r.Tokens[t] != g.Tokens[t] {
				same = t
				break
			}
		}
		d, _ := maxAbsDiff(r.LogProbs[:min(same, len(r.LogProbs))], g.LogProbs[:min(same, len(g.LogProbs))])
		worst = math.Max(worst, d)
		a.Tokens += same
		if same < n {
			m := margin(r.Prompt, g.Tokens[:same], r.Tokens[same], g.Tokens[same])
			mm := Mismatch{Prompt: r.Prompt, Batched: batched, Pos: same, Want: r.Tokens[same], Got: g.Tokens[same],
				Margin: jsonFloat(m), Tie: m <= tol}
			a.Mismatches = append(a.Mismatches, mm)
			if !mm.Tie {
				a.Pass = false
			}
		} else if len(r.Tokens) != len(g.Tokens) {
			a.Pass = false
		}
	}
	a.MaxAbsLogp = jsonFloat(worst)
	if !(worst <= tol) {
		a.Pass = false
	}
	return a
}

// tokenMargin is log p(got) − log p(want) after prompt+prefix under lctx's
// model (teacher-forced); +Inf when scoring fails.
func tokenMargin(ctx context.Context, lctx *llama.Context, prompt, prefix []int32, want, got int32) float64 {
	p := append(append([]int32(nil), prompt...), prefix...)
	lw, err := lctx.Score(ctx, p, []int32{want})
	if err != nil {
		return math.Inf(1)
	}
	lg, err := lctx.Score(ctx, p, []int32{got})
	if err != nil {
		return math.Inf(1)
	}
	return float64(lg[0]) - float64(lw[0])
}

// noiseFloor scores the greedy sequences on the higher-precision twin (on
// the CPU) and returns max |Δ log-prob|.
func noiseFloor(ctx context.Context, cfg RolloutConfig, nctx int, prompts [][]int32, seqs []GenSeq) (float64, error) {
	lm, err := llama.LoadModel(cfg.NoiseModel, llama.ModelParams{})
	if err != nil {
		return 0, err
	}
	defer lm.Close()
	lctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: nctx, Threads: cfg.Threads, NoPrefixCache: true})
	if err != nil {
		return 0, err
	}
	defer lctx.Close()
	worst := 0.0
	for _, s := range seqs {
		lp, err := lctx.Score(ctx, prompts[s.Prompt], s.Tokens)
		if err != nil {
			return 0, err
		}
		d, same := maxAbsDiff(s.LogProbs, lp)
		if !same {
			return 0, fmt.Errorf("%w: scored %d log-probs for %d tokens", ErrConfig, len(lp), len(s.Tokens))
		}
		worst = math.Max(worst, d)
	}
	return worst, nil
}
