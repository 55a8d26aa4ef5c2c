package lora

import (
	"fmt"
	"strconv"
	"strings"
)

// Target is one projection of a Qwen2 block that LoRA can adapt: its short
// name (as --targets and cgo.LoRAConfig.Targets spell it) and the llama.cpp
// tensor of every block it adapts ("blk.<N>.<Tensor>.weight").
type Target struct {
	Short  string // "q"
	Tensor string // "attn_q"
}

// Short target names (the only place they are defined; cgo re-exports them).
const (
	TargetQ    = "q"    // attn_q
	TargetK    = "k"    // attn_k
	TargetV    = "v"    // attn_v
	TargetO    = "o"    // attn_output
	TargetGate = "gate" // ffn_gate
	TargetUp   = "up"   // ffn_up
	TargetDown = "down" // ffn_down
)

// Targets lists every LoRA target in canonical order. The index of a target
// here is its index on the C side of the training graph (cgo passes these
// tensor names to C; C has no names of its own) and its rank in the
// canonical parameter order (see Less).
var Targets = []Target{
	{TargetQ, "attn_q"}, {TargetK, "attn_k"}, {TargetV, "attn_v"}, {TargetO, "attn_output"},
	{TargetGate, "ffn_gate"}, {TargetUp, "ffn_up"}, {TargetDown, "ffn_down"},
}

// TargetTensors maps the short target names accepted by --targets to the
// llama.cpp tensor name of the projection in every block ("blk.N.<name>.weight").
// Derived from Targets.
var TargetTensors = func() map[string]string {
	m := map[string]string{}
	for _, t := range Targets {
		m[t.Short] = t.Tensor
	}
	return m
}()

// DefaultTargets are all seven projections of a Qwen2 block, in canonical order.
var DefaultTargets = func() []string {
	s := make([]string, len(Targets))
	for i, t := range Targets {
		s[i] = t.Short
	}
	return s
}()

// TargetIndex returns the index of a short target name in Targets, or -1.
func TargetIndex(short string) int {
	for i, t := range Targets {
		if t.Short == short {
			return i
		}
	}
	return -1
}

// BaseName is the base tensor a target adapts in block layer:
// "blk.<layer>.<tensor>.weight".
func BaseName(layer int, short string) string {
	return fmt.Sprintf("blk.%d.%s.weight", layer, TargetTensors[short])
}

// ParseBase is the inverse of BaseName: the block and short target name of
// a base tensor name; ok is false for any other name.
func ParseBase(base string) (layer int, short string, ok bool) {
	rest, ok := strings.CutPrefix(base, "blk.")
	if !ok {
		return 0, "", false
	}
	blk, name, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	l, err := strconv.Atoi(blk)
	if err != nil || l < 0 || strconv.Itoa(l) != blk {
		return 0, "", false
	}
	for _, t := range Targets {
		if name == t.Tensor+".weight" {
			return l, t.Short, true
		}
	}
	return 0, "", false
}

// orderKey is the canonical sort key of a base tensor name: block tensors
// by block number then target index; anything else after them, by name.
func orderKey(base string) (known bool, layer, target int) {
	l, short, ok := ParseBase(base)
	if !ok {
		return false, 0, 0
	}
	return true, l, TargetIndex(short)
}

// Less is THE parameter order of empo2 (one order for cgo, trainer, lora
// and llama; no permutation anywhere): pairs by block number (numerically),
// then by target in Targets order (q, k, v, o, gate, up, down); names that
// are not block targets come after, by name. Within a pair, A precedes B.
// It is the order of cgo.Model.Params, of the training-state moments, of
// the random draws of Init and cgo.Load, and of adapter files written here.
func Less(a, b string) bool {
	ka, la, ta := orderKey(a)
	kb, lb, tb := orderKey(b)
	switch {
	case ka != kb:
		return ka
	case !ka:
		return a < b
	case la != lb:
		return la < lb
	case ta != tb:
		return ta < tb
	}
	return a < b
}

// ParamInfo describes one trainable tensor (one half of a pair), in the
// canonical order (Less, A before B). cgo.ParamInfo is this type.
type ParamInfo struct {
	// Name follows llama.cpp's adapter format: "<base tensor>.lora_a" or
	// "<base tensor>.lora_b", e.g. "blk.0.attn_q.weight.lora_a".
	Name string
	// Shape is ggml's ne: lora_a [n_in, r], lora_b [r, n_out]. Data is
	// row-major over ne[0] (element (i0, i1) at i1*Shape[0]+i0), i.e. exactly
	// the bytes a GGUF F32 tensor of this shape holds.
	Shape  [2]int
	Base   string // base tensor name, e.g. "blk.0.attn_q.weight"
	Target string // short target name ("" when Base is not a block target)
	Layer  int
	IsB    bool // lora_b (else lora_a)
}

// Params describes the adapter's tensors in canonical order (Sort first):
// A then B of every pair. Tensors returns the data in the same order.
func (a *Adapter) Params() []ParamInfo {
	a.Sort()
	out := make([]ParamInfo, 0, 2*len(a.Pairs))
	for _, p := range a.Pairs {
		l, short, _ := ParseBase(p.Base)
		out = append(out,
			ParamInfo{Name: p.NameA(), Shape: [2]int{p.In, p.Rank}, Base: p.Base, Target: short, Layer: l},
			ParamInfo{Name: p.NameB(), Shape: [2]int{p.Rank, p.Out}, Base: p.Base, Target: short, Layer: l, IsB: true})
	}
	return out
}

// Tensors returns the adapter's tensors in canonical order (A then B of
// every pair), aliasing the adapter's memory.
func (a *Adapter) Tensors() [][]float32 {
	a.Sort()
	out := make([][]float32, 0, 2*len(a.Pairs))
	for _, p := range a.Pairs {
		out = append(out, p.A, p.B)
	}
	return out
}

// FromParams builds an adapter from tensors described by infos (any
// subset of pairs, A and B of each, in canonical order), copying the data.
func FromParams(arch string, alpha float32, infos []ParamInfo, data [][]float32) (*Adapter, error) {
	if len(infos) != len(data) || len(infos)%2 != 0 {
		return nil, fmt.Errorf("%w: %d param infos, %d tensors", ErrInvalid, len(infos), len(data))
	}
	a := &Adapter{Arch: arch, Alpha: alpha, Meta: map[string]string{}}
	for i := 0; i < len(infos); i += 2 {
		ia, ib := infos[i], infos[i+1]
		if ia.IsB || !ib.IsB || ia.Base != ib.Base || ia.Name != ia.Base+SuffixA || ib.Name != ib.Base+SuffixB {
			return nil, fmt.Errorf("%w: params %d, %d (%s, %s) are not the A and B of one pair", ErrInvalid, i, i+1, ia.Name, ib.Name)
		}
		if ia.Shape[1] != ib.Shape[0] {
			return nil, fmt.Errorf("%w: %s: rank of lora_a %d, lora_b %d", ErrInvalid, ia.Base, ia.Shape[1], ib.Shape[0])
		}
		for j := i; j <= i+1; j++ {
			if len(data[j]) != infos[j].Shape[0]*infos[j].Shape[1] {
				return nil, fmt.Errorf("%w: %s has %d values, shape %v", ErrInvalid, infos[j].Name, len(data[j]), infos[j].Shape)
			}
		}
		if i > 0 && !Less(infos[i-2].Base, ia.Base) {
			return nil, fmt.Errorf("%w: %s after %s is not the canonical order", ErrInvalid, ia.Base, infos[i-2].Base)
		}
		a.Pairs = append(a.Pairs, &Pair{Base: ia.Base, In: ia.Shape[0], Rank: ia.Shape[1], Out: ib.Shape[1],
			A: append([]float32(nil), data[i]...), B: append([]float32(nil), data[i+1]...)})
	}
	if err := a.Check(); err != nil {
		return nil, err
	}
	return a, nil
}

// SameLayout reports whether two tensor lists describe the same tensors in
// the same order (names and shapes); it is a check, never a reordering.
func SameLayout(x, y []ParamInfo) error {
	if len(x) != len(y) {
		return fmt.Errorf("%w: %d tensors vs %d (the targets differ)", ErrMismatch, len(x), len(y))
	}
	for i := range x {
		if x[i].Name != y[i].Name {
			return fmt.Errorf("%w: tensor %d is %s vs %s (the targets differ)", ErrMismatch, i, x[i].Name, y[i].Name)
		}
		if x[i].Shape != y[i].Shape {
			return fmt.Errorf("%w: %s: shape %v vs %v (rank or base model differ)", ErrMismatch, x[i].Name, x[i].Shape, y[i].Shape)
		}
	}
	return nil
}
