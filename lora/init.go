package lora

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/empo2/empo2/gguf"
)

// ParseTargets parses a comma-separated target list such as "q,v,down"
// (short names or llama.cpp names such as "attn_q"), removing duplicates.
// An empty string gives DefaultTargets.
func ParseTargets(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return append([]string(nil), DefaultTargets...), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		short := ""
		if _, ok := TargetTensors[t]; ok {
			short = t
		} else {
			for k, v := range TargetTensors {
				if v == t {
					short = k
				}
			}
		}
		if short == "" {
			return nil, fmt.Errorf("%w: unknown target %q (want some of q,k,v,o,gate,up,down)", ErrConfig, t)
		}
		if !seen[short] {
			seen[short] = true
			out = append(out, short)
		}
	}
	return out, nil
}

// TargetWeights lists the base tensors the targets select in base: every
// "blk.<N>.<tensor>.weight" that is a 2-D matrix, in the canonical order
// (Less: block, then q, k, v, o, gate, up, down), the order in which the
// training graph (package cgo) lays out its parameters. It is an error when
// a target selects no tensor at all.
func TargetWeights(base *gguf.File, targets []string) ([]gguf.TensorInfo, error) {
	want := map[string]bool{}
	for _, t := range targets {
		if TargetIndex(t) < 0 {
			return nil, fmt.Errorf("%w: unknown target %q", ErrConfig, t)
		}
		want[t] = true
	}
	var out []gguf.TensorInfo
	found := map[string]int{}
	for _, ti := range base.Tensors {
		_, short, ok := ParseBase(ti.Name)
		if !ok || !want[short] {
			continue
		}
		if len(ti.Shape) != 2 {
			return nil, fmt.Errorf("%w: %s has shape %v, want a matrix", ErrMismatch, ti.Name, ti.Shape)
		}
		out = append(out, ti)
		found[short]++
	}
	for _, t := range targets {
		if found[t] == 0 {
			return nil, fmt.Errorf("%w: target %q: the base model has no blk.N.%s.weight tensor", ErrMismatch, t, TargetTensors[t])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return Less(out[i].Name, out[j].Name) })
	return out, nil
}

// InitConfig configures Init.
type InitConfig struct {
	Rank    int      // r ≥ 1
	Alpha   float32  // adapter.lora.alpha; scale = alpha/r (0 means scale 1, as in llama.cpp)
	Targets []string // short target names; nil means DefaultTargets
	Seed    uint64   // seed of the PCG generator that draws A (and B)
	RandomB bool     // draw B uniform in ±1/√r instead of zero
}

// NewInitRand returns the random source of Init's draws for seed. The
// training graph's own initialisation (cgo.Load) draws from it too.
func NewInitRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// FillUniform sets dst, in order, to draws from rng uniform in ±bound.
func FillUniform(rng *rand.Rand, dst []float32, bound float64) {
	for i := range dst {
		dst[i] = float32((2*rng.Float64() - 1) * bound)
	}
}

// Init makes a new adapter for the base model: for every selected weight
// W (ne = [in, out]), A (r×in) is uniform in ±1/√in, which is PEFT's
// kaiming_uniform_(a=√5) (gain √(2/(1+5)), bound gain·√(3/in) = 1/√in; He et
// al. 2015), and B (out×r) is zero, or uniform in ±1/√r with RandomB.
// Values are drawn from NewInitRand(Seed) (math/rand/v2's PCG seeded with
// (Seed, 0x9e3779b97f4a7c15)), pair by pair in TargetWeights order, A then B (B
// only with RandomB), element by element in ggml order: the same draws as
// the training graph's own initialisation (cgo.Load with the same seed), so
// `empo2 lora init --seed S` and a policy loaded with seed S start equal.
func Init(base *gguf.File, cfg InitConfig) (*Adapter, error) {
	if cfg.Rank < 1 || cfg.Rank > 1<<16 {
		return nil, fmt.Errorf("%w: rank %d (want 1..65536)", ErrConfig, cfg.Rank)
	}
	if math.IsNaN(float64(cfg.Alpha)) || math.IsInf(float64(cfg.Alpha), 0) || cfg.Alpha < 0 {
		return nil, fmt.Errorf("%w: alpha %v must be finite and ≥ 0", ErrConfig, cfg.Alpha)
	}
	arch, _ := base.String(KeyArchitecture)
	if arch == "" {
		return nil, fmt.Errorf("%w: base model has no %s", ErrMismatch, KeyArchitecture)
	}
	if gt, ok := base.String(KeyGeneralType); ok && gt == "adapter" {
		return nil, fmt.Errorf("%w: %s is an adapter, not a base model", ErrMismatch, base.Path)
	}
	targets := cfg.Targets
	if targets == nil {
		targets = DefaultTargets
	}
	ws, err := TargetWeights(base, targets)
	if err != nil {
		return nil, err
	}
	rng := NewInitRand(cfg.Seed)
	a := &Adapter{Arch: arch, Alpha: cfg.Alpha, Meta: map[string]string{}}
	for _, w := range ws {
		in, out := int(w.Shape[0]), int(w.Shape[1])
		if cfg.Rank > in || cfg.Rank > out {
			return nil, fmt.Errorf("%w: rank %d exceeds %s's dimensions %d×%d", ErrConfig, cfg.Rank, w.Name, out, in)
		}
		p := &Pair{Base: w.Name, In: in, Out: out, Rank: cfg.Rank,
			A: make([]float32, in*cfg.Rank), B: make([]float32, out*cfg.Rank)}
		FillUniform(rng, p.A, 1/math.Sqrt(float64(in)))
		if cfg.RandomB {
			FillUniform(rng, p.B, 1/math.Sqrt(float64(cfg.Rank)))
		}
		a.Pairs = append(a.Pairs, p)
	}
	a.Sort()
	return a, nil
}
