package gpucheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
)

// TrainConfig configures the training-graph check.
type TrainConfig struct {
	Model   string
	Device  string // Options.Device of the engine under test: gpu, auto or cpu
	Threads int
	Rank    int   // LoRA rank (0: 8), all targets, alpha 2·rank
	Seed    int64 // batch and LoRA initialisation
	// Shared also checks cgo.LoadShared on llama.cpp's weights with every
	// layer offloaded (the engine `empo2 train` builds).
	Shared bool
	// LogpTol bounds |Δ log-prob| (0: 1e-4); GradTol bounds each LoRA
	// tensor's ‖Δg‖/‖g‖ (0: 1e-3).
	LogpTol, GradTol float64
	// CompareNodes also compares every node of the forward and of the
	// training graph with the reference's (CompareNodes; NodeTol bounds
	// each node's ‖Δ‖/‖ref‖, 0: 1e-2, above TF32 rounding): a diagnosis,
	// reported in TrainVariant.Nodes and logged in one line per graph; it
	// does not change Pass.
	CompareNodes bool
	NodeTol      float64
	// Dump, when set, is a directory that receives adapter.gguf (the LoRA
	// weights of the batch) and hf-check.json (batch, objective, log-probs
	// and gradients of both engines) for scripts/gpu_hf_check.py.
	Dump string
}

// TensorDiff is one LoRA tensor's gradient comparison.
type TensorDiff struct {
	Name    string    `json:"name"`
	Rel     jsonFloat `json:"rel"`      // ‖g − g_ref‖₂ / ‖g_ref‖₂
	RefNorm float64   `json:"ref_norm"` // ‖g_ref‖₂
}

// TrainVariant is one engine under test against the CPU reference.
type TrainVariant struct {
	Name       string    `json:"name"` // "load" (cgo.Load) or "shared" (cgo.LoadShared on llama.cpp's offloaded weights)
	Backend    string    `json:"backend"`
	LogpMaxAbs jsonFloat `json:"logprob_max_abs_diff"`
	// LossRef, Loss: the clipped objective's value in the reference and
	// in this engine's training step (computed from the step's own
	// forward log-probs).
	LossRef      float64         `json:"loss_ref"`
	Loss         float64         `json:"loss"`
	LossRel      jsonFloat       `json:"loss_rel_diff"`
	Stats        cgo.Stats       `json:"stats"`
	GradWorstRel jsonFloat       `json:"grad_worst_rel"`
	GradWorst    string          `json:"grad_worst_tensor"`
	Grads        []TensorDiff    `json:"grads"`
	Memory       cgo.MemoryStats `json:"memory"`
	Sched        SchedReport     `json:"sched"`
	Nodes        *NodeReport     `json:"nodes,omitempty"` // with TrainConfig.CompareNodes
	Seconds      float64         `json:"seconds"`         // load + forward + forward/backward (+ node comparison)
	Pass         bool            `json:"pass"`
}

// TrainResult is the training check's document.
type TrainResult struct {
	Kind             string         `json:"kind"`
	Model            string         `json:"model"`
	WeightType       string         `json:"weight_type"`
	Device           string         `json:"device"`
	ReferenceBackend string         `json:"reference_backend"`
	Devices          []llama.Device `json:"devices"`
	Sequences        int            `json:"sequences"`
	Tokens           int            `json:"tokens"`
	TrainedTokens    int            `json:"trained_tokens"`
	Rank             int            `json:"rank"`
	LogpTol          float64        `json:"logprob_tol"`
	GradTol          float64        `json:"grad_tol"`
	ReferenceStats   cgo.Stats      `json:"reference_stats"`
	Variants         []TrainVariant `json:"variants"`
	Seconds          float64        `json:"seconds"`
	Pass             bool           `json:"pass"`
}

// checkBatch builds the batch: four sequences of different lengths, the
// first part untrained (prompt), old log-probs offset from the reference's
// current ones by 0, ±0.1, ±0.5 and 2.5 (ratios 1, 1.11, 0.90, 0.61, 1.65,
// 12.2) so that the clipped objective has unclipped, ε-clipped and, for
// A < 0, dual-clipped tokens (ratio > c = 10), all well away from the
// branch boundaries (ratios 0.8, 1.3 and 10), advantages of both signs, and
// one sequence dropped by low-probability masking.
func checkBatch(rng *rand.Rand, vocab int, ref *cgo.Model) ([]cgo.Sequence, error) {
	lengths := []int{24, 17, 31, 12}
	adv := []float32{1, -1, 0.5, -2}
	seqs := make([][]int32, len(lengths))
	for i, n := range lengths {
		seqs[i] = make([]int32, n)
		for t := range seqs[i] {
			seqs[i][t] = int32(rng.IntN(vocab))
		}
	}
	lp, err := ref.LogProbsBatch(seqs)
	if err != nil {
		return nil, err
	}
	offsets := []float32{0, 0.1, -0.5, 0.5, -0.1, 2.5}
	batch := make([]cgo.Sequence, len(seqs))
	for i, toks := range seqs {
		n := len(toks)
		s := cgo.Sequence{Tokens: toks, Trained: make([]bool, n), OldLogp: make([]float32, n), Advantage: make([]float32, n)}
		for t := n / 3; t < n; t++ {
			if t == 0 {
				continue
			}
			s.Trained[t] = true
			s.OldLogp[t] = lp[i][t] - offsets[t%len(offsets)]
			s.Advantage[t] = adv[i]
		}
		if i == len(seqs)-1 { // masked as the trainer masks (algo.Masked): one old log-prob under δ
			s.OldLogp[n-1] = -50
			if algo.Masked(s.OldLogp[n/3:], algo.DefaultLowProbThreshold) {
				clear(s.Trained)
			}
		}
		batch[i] = s
	}
	return batch, nil
}

// Train runs the check: a CPU reference engine and the engine(s) under test
// get the same LoRA weights and batch. The result is returned even when it
// fails (ErrMismatch).
func Train(cfg TrainConfig) (*TrainResult, error) {
	t0 := time.Now()
	if cfg.Rank == 0 {
		cfg.Rank = 8
	}
	if cfg.LogpTol == 0 {
		cfg.LogpTol = 1e-4
	}
	if cfg.GradTol == 0 {
		cfg.GradTol = 1e-3
	}
	if cfg.NodeTol == 0 {
		cfg.NodeTol = 1e-2
	}
	if cfg.Rank < 1 || cfg.LogpTol < 0 || cfg.GradTol < 0 || cfg.NodeTol < 0 || cfg.Threads < 0 {
		return nil, fmt.Errorf("%w: rank %d, tolerances %v/%v/%v, threads %d", ErrConfig, cfg.Rank, cfg.LogpTol, cfg.GradTol, cfg.NodeTol, cfg.Threads)
	}
	lcfg := cgo.LoRAConfig{Rank: cfg.Rank, Alpha: float32(2 * cfg.Rank), Seed: cfg.Seed, RandomB: true}
	ref, err := cgo.Load(cfg.Model, lcfg, cgo.Options{Threads: cfg.Threads, Device: "cpu"})
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	info := ref.Info()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x67707563))
	batch, err := checkBatch(rng, info.NVocab, ref)
	if err != nil {
		return nil, err
	}
	obj := cgo.DefaultObjective()
	toks := make([][]int32, len(batch))
	res := &TrainResult{Kind: KindTrain, Model: cfg.Model, WeightType: info.WeightType, Device: cfg.Device,
		ReferenceBackend: info.Backend, Devices: llama.Devices(), Sequences: len(batch), Rank: cfg.Rank,
		LogpTol: cfg.LogpTol, GradTol: cfg.GradTol, Pass: true}
	for i, s := range batch {
		toks[i] = s.Tokens
		res.Tokens += len(s.Tokens)
	}
	res.TrainedTokens, _ = cgo.CountTrained(batch)
	refLogp, err := ref.LogProbsBatch(toks)
	if err != nil {
		return nil, err
	}
	if res.ReferenceStats, err = ref.ForwardBackward(batch, obj, 0); err != nil {
		return nil, err
	}
	refGrads, err := ref.Grads()
	if err != nil {
		return nil, err
	}
	params, err := ref.ReadParams()
	if err != nil {
		return nil, err
	}

	// run one engine under test on the batch and compare
	variant := func(name string, load func() (*cgo.Model, func(), error)) (*TrainVariant, [][]float32, [][]float32, error) {
		t1 := time.Now()
		restore := schedDebug()
		m, release, err := load()
		restore()
		if err != nil {
			return nil, nil, nil, err
		}
		defer release()
		if err := m.WriteParams(params); err != nil {
			return nil, nil, nil, err
		}
		v := &TrainVariant{Name: name, Backend: m.Info().Backend, Pass: true}
		var lp [][]float32
		lines, err := captureLog(func() error {
			var err error
			if lp, err = m.LogProbsBatch(toks); err != nil {
				return err
			}
			v.Stats, err = m.ForwardBackward(batch, obj, 0)
			return err
		})
		if err != nil {
			return nil, nil, nil, err
		}
		v.Sched = parseSchedDump(lines, v.Backend)
		v.Memory = m.MemoryBytes()
		worst := 0.0
		for i := range refLogp {
			d, same := maxAbsDiff(refLogp[i], lp[i])
			if !same {
				d = math.Inf(1)
			}
			worst = math.Max(worst, d)
		}
		v.LogpMaxAbs = jsonFloat(worst)
		v.LossRef, v.Loss = res.ReferenceStats.Loss, v.Stats.Loss
		v.LossRel = jsonFloat(math.Abs(v.Loss-v.LossRef) / math.Max(math.Abs(v.LossRef), 1e-30))
		grads, err := m.Grads()
		if err != nil {
			return nil, nil, nil, err
		}
		ps := m.Params()
		for i, g := range refGrads {
			rel, norm := relDiff(g, grads[i])
			v.Grads = append(v.Grads, TensorDiff{ps[i].Name, jsonFloat(rel), norm})
			if rel > float64(v.GradWorstRel) || math.IsInf(rel, 1) {
				v.GradWorstRel, v.GradWorst = jsonFloat(rel), ps[i].Name
			}
		}
		v.Pass = worst <= cfg.LogpTol && float64(v.GradWorstRel) <= cfg.GradTol &&
			v.Stats.Tokens == res.ReferenceStats.Tokens && v.Stats.Sequences == res.ReferenceStats.Sequences
		if cfg.CompareNodes {
			v.Nodes = &NodeReport{}
			for _, train := range []bool{false, true} {
				c, err := CompareNodes(ref, m, toks, CompareConfig{Train: train, Seed: cfg.Seed, Tol: cfg.NodeTol, LogpTol: cfg.LogpTol, GradTol: cfg.GradTol})
				if err != nil {
					return nil, nil, nil, fmt.Errorf("node comparison: %w", err)
				}
				if train {
					v.Nodes.Train = c
				} else {
					v.Nodes.Forward = c
				}
				log.Info().Str("engine", name).Msg("compare-nodes: " + c.Verdict)
			}
		}
		v.Seconds = seconds(time.Since(t1))
		return v, lp, grads, nil
	}

	var devLogp, devGrads [][]float32
	v, lp, g, err := variant("load", func() (*cgo.Model, func(), error) {
		m, err := cgo.Load(cfg.Model, lcfg, cgo.Options{Threads: cfg.Threads, Device: cfg.Device})
		return m, func() { m.Close() }, err
	})
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", cfg.Device, err)
	}
	res.Variants = append(res.Variants, *v)
	devLogp, devGrads = lp, g
	if cfg.Shared {
		v, _, _, err := variant("shared", func() (*cgo.Model, func(), error) {
			lm, err := llama.LoadModel(cfg.Model, llama.ModelParams{GPULayers: -1})
			if err != nil {
				return nil, nil, err
			}
			m, err := cgo.LoadShared(lm, lcfg, cgo.Options{Threads: cfg.Threads})
			if err != nil {
				lm.Close()
				return nil, nil, err
			}
			return m, func() { m.Close(); lm.Close() }, nil
		})
		if err != nil {
			return nil, fmt.Errorf("shared engine: %w", err)
		}
		res.Variants = append(res.Variants, *v)
	}
	for _, v := range res.Variants {
		res.Pass = res.Pass && v.Pass
	}
	if cfg.Dump != "" {
		if err := dumpHF(cfg.Dump, ref, batch, obj, refLogp, refGrads, res.ReferenceStats, devLogp, devGrads, res.Variants[0]); err != nil {
			return nil, fmt.Errorf("dump: %w", err)
		}
	}
	res.Seconds = seconds(time.Since(t0))
	if !res.Pass {
		return res, ErrMismatch
	}
	return res, nil
}

// HFDump is hf-check.json: what scripts/gpu_hf_check.py needs to recompute
// the batch's log-probs, clipped objective and LoRA gradients with
// transformers + PEFT, and empo2's own values to compare with. Tensors use
// torch's layout: a gradient of a GGUF tensor of ne [in, r] is the flat data
// of a torch tensor of shape [r, in] (ggml's ne[0] is the contiguous one).
type HFDump struct {
	Arch      string      `json:"arch"`
	Rank      int         `json:"rank"`
	Alpha     float32     `json:"lora_alpha"`
	Objective HFObjective `json:"objective"`
	Batch     []HFSeq     `json:"batch"`
	Reference HFValues    `json:"reference"` // the CPU engine
	Device    HFValues    `json:"device"`    // the engine under test (cgo.Load on the device)
}

// HFObjective is the clipped surrogate's settings (algo.PPO, token-mean).
type HFObjective struct {
	ClipLow     float32 `json:"clip_low"`
	ClipHigh    float32 `json:"clip_high"`
	DualClip    float32 `json:"dual_clip"`
	Aggregation string  `json:"aggregation"`
}

// HFSeq is one sequence of the batch (masked ones have no trained token).
type HFSeq struct {
	Tokens    []int32   `json:"tokens"`
	Trained   []bool    `json:"trained"`
	OldLogp   []float32 `json:"old_logp"`
	Advantage []float32 `json:"advantage"`
}

// HFValues are one engine's results.
type HFValues struct {
	Backend string      `json:"backend"`
	Logp    [][]float32 `json:"logp"` // [seq][t], t ≥ 1 meaningful
	Loss    float64     `json:"loss"`
	Grads   []HFGrad    `json:"grads"`
}

// HFGrad is one LoRA tensor's gradient, named as in PEFT.
type HFGrad struct {
	Module string    `json:"module"` // transformers module, e.g. model.layers.0.self_attn.q_proj
	Part   string    `json:"part"`   // "A" or "B"
	Shape  [2]int    `json:"shape"`  // torch shape: [r, in] for A, [out, r] for B
	Data   []float32 `json:"data"`
}

func dumpHF(dir string, ref *cgo.Model, batch []cgo.Sequence, obj cgo.Objective, refLogp, refGrads [][]float32, refStats cgo.Stats,
	devLogp, devGrads [][]float32, dev TrainVariant) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	a, err := ref.ReadAdapter()
	if err != nil {
		return err
	}
	if err := a.Write(filepath.Join(dir, "adapter.gguf"), gguf.TypeF32); err != nil {
		return err
	}
	grads := func(g [][]float32) ([]HFGrad, error) {
		var out []HFGrad
		for i, p := range ref.Params() {
			hf, ok := lora.HFTensorName(p.Base)
			if !ok {
				return nil, fmt.Errorf("%w: no transformers name for %s", ErrConfig, p.Base)
			}
			part := "A"
			if p.IsB {
				part = "B"
			}
			out = append(out, HFGrad{Module: strings.TrimSuffix(hf, ".weight"), Part: part,
				Shape: [2]int{p.Shape[1], p.Shape[0]}, Data: g[i]})
		}
		return out, nil
	}
	d := HFDump{Arch: ref.Info().Arch, Rank: ref.LoRA().Rank, Alpha: ref.LoRA().Alpha,
		Objective: HFObjective{Aggregation: string(obj.Aggregation)}}
	if p, ok := obj.Policy.(algo.PPO); ok {
		d.Objective.ClipLow, d.Objective.ClipHigh, d.Objective.DualClip = p.ClipLow, p.ClipHigh, p.DualClip
	} else {
		return fmt.Errorf("%w: the transformers check knows the algo.PPO surrogate only", ErrConfig)
	}
	if d.Objective.Aggregation == "" {
		d.Objective.Aggregation = string(cgo.AggTokenMean)
	}
	for _, s := range batch {
		d.Batch = append(d.Batch, HFSeq{s.Tokens, s.Trained, s.OldLogp, s.Advantage})
	}
	if d.Reference.Grads, err = grads(refGrads); err != nil {
		return err
	}
	d.Reference.Backend, d.Reference.Logp, d.Reference.Loss = ref.Info().Backend, refLogp, refStats.Loss
	if d.Device.Grads, err = grads(devGrads); err != nil {
		return err
	}
	d.Device.Backend, d.Device.Logp, d.Device.Loss = dev.Backend, devLogp, dev.Loss
	return WriteJSON(filepath.Join(dir, "hf-check.json"), d)
}
