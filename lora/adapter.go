package lora

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Sentinel errors; errors returned by this package wrap one of them (and
// gguf's own errors for unreadable files).
var (
	// ErrNotAdapter means the file is a GGUF but not a llama.cpp LoRA adapter
	// (wrong general.type or adapter.type, or a tensor that is not a LoRA half).
	ErrNotAdapter = errors.New("lora: not a LoRA adapter")
	// ErrMismatch means the adapter does not fit the base model
	// (architecture, missing tensor or shape).
	ErrMismatch = errors.New("lora: adapter does not match the base model")
	// ErrInvalid means the adapter is malformed on its own terms (missing
	// half of a pair, inconsistent rank, non-finite values, bad alpha).
	ErrInvalid = errors.New("lora: invalid adapter")
	// ErrUnsupported means a valid file uses a feature this package does
	// not handle (e.g. quantized LoRA tensors, token_embd adapters).
	ErrUnsupported = errors.New("lora: unsupported")
	// ErrConfig means bad arguments (rank, targets, output type).
	ErrConfig = errors.New("lora: invalid configuration")
)

// GGUF metadata keys and tensor-name suffixes of llama.cpp adapters.
const (
	KeyGeneralType  = "general.type"
	KeyArchitecture = "general.architecture"
	KeyAdapterType  = "adapter.type"
	KeyAlpha        = "adapter.lora.alpha"
	SuffixA         = ".lora_a"
	SuffixB         = ".lora_b"
)

// Pair is the LoRA update of one base weight W (ggml ne = [In, Out]).
//
// A has ggml shape [In, Rank] and is stored row-major as Rank rows of In
// values (A[k*In+i]); B has ggml shape [Rank, Out], stored as Out rows of Rank
// values (B[o*Rank+k]). The weight seen by llama.cpp is W + s·B·A with
// s = alpha/Rank.
type Pair struct {
	Base string // base tensor name, e.g. "blk.0.attn_q.weight"
	In   int
	Out  int
	Rank int
	A    []float32
	B    []float32
}

// NameA and NameB are the tensor names of the pair in the adapter file.
func (p *Pair) NameA() string { return p.Base + SuffixA }
func (p *Pair) NameB() string { return p.Base + SuffixB }

// SplitName splits an adapter tensor name into the base tensor's name and
// the half: "<W>.lora_a" gives (W, false, true), "<W>.lora_b" (W, true,
// true); any other name gives (name, false, false).
func SplitName(name string) (base string, isB, ok bool) {
	if b, ok := strings.CutSuffix(name, SuffixA); ok {
		return b, false, true
	}
	if b, ok := strings.CutSuffix(name, SuffixB); ok {
		return b, true, true
	}
	return name, false, false
}

// check validates the pair's dimensions and values.
func (p *Pair) check() error {
	if p.In <= 0 || p.Out <= 0 || p.Rank <= 0 {
		return fmt.Errorf("%w: %s: dimensions in=%d out=%d rank=%d", ErrInvalid, p.Base, p.In, p.Out, p.Rank)
	}
	if len(p.A) != p.In*p.Rank {
		return fmt.Errorf("%w: %s: lora_a has %d values, want %d×%d", ErrInvalid, p.Base, len(p.A), p.Rank, p.In)
	}
	if len(p.B) != p.Out*p.Rank {
		return fmt.Errorf("%w: %s: lora_b has %d values, want %d×%d", ErrInvalid, p.Base, len(p.B), p.Out, p.Rank)
	}
	for i, x := range p.A {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%w: %s: lora_a[%d] = %v is not finite", ErrInvalid, p.Base, i, x)
		}
	}
	for i, x := range p.B {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%w: %s: lora_b[%d] = %v is not finite", ErrInvalid, p.Base, i, x)
		}
	}
	return nil
}

// Adapter is a LoRA adapter: its base architecture, alpha and pairs
// (in the canonical order of Less: block, then target).
type Adapter struct {
	Arch  string  // general.architecture of the base model, e.g. "qwen2"
	Alpha float32 // adapter.lora.alpha
	Pairs []*Pair
	// Meta holds extra string metadata written under its keys (for example
	// "general.name" or "adapter.empo2.*"); reserved keys are ignored.
	Meta map[string]string
}

// Rank returns the rank shared by all pairs, or 0 when there are no pairs
// or the ranks differ.
func (a *Adapter) Rank() int {
	r := 0
	for _, p := range a.Pairs {
		if r == 0 {
			r = p.Rank
		} else if p.Rank != r {
			return 0
		}
	}
	return r
}

// Scale returns the factor llama.cpp multiplies B·A·x by for a pair of rank
// r (adapter scale 1): alpha/r, or 1 when alpha is 0 (llama-adapter.h,
// llama_adapter_lora_weight::get_scale).
func (a *Adapter) Scale(rank int) float32 {
	if a.Alpha == 0 || rank <= 0 {
		return 1
	}
	return a.Alpha / float32(rank)
}

// Pair returns the pair adapting the base tensor named base, or nil.
// The pairs must be in canonical order (Sort).
func (a *Adapter) Pair(base string) *Pair {
	i := sort.Search(len(a.Pairs), func(i int) bool { return !Less(a.Pairs[i].Base, base) })
	if i < len(a.Pairs) && a.Pairs[i].Base == base {
		return a.Pairs[i]
	}
	return nil
}

// Sort puts the pairs in the canonical order (Less: block number, then
// target q,k,v,o,gate,up,down), the order files are written in and the
// order of every parameter list in empo2. A no-op when already sorted.
func (a *Adapter) Sort() {
	if sort.SliceIsSorted(a.Pairs, func(i, j int) bool { return Less(a.Pairs[i].Base, a.Pairs[j].Base) }) {
		return
	}
	sort.SliceStable(a.Pairs, func(i, j int) bool { return Less(a.Pairs[i].Base, a.Pairs[j].Base) })
}

// Check validates the adapter on its own: architecture set, finite alpha,
// at least one pair, no duplicates, consistent and finite pairs, no
// token_embd pair.
func (a *Adapter) Check() error {
	if a.Arch == "" {
		return fmt.Errorf("%w: no architecture", ErrInvalid)
	}
	if math.IsNaN(float64(a.Alpha)) || math.IsInf(float64(a.Alpha), 0) {
		return fmt.Errorf("%w: alpha %v is not finite", ErrInvalid, a.Alpha)
	}
	if len(a.Pairs) == 0 {
		return fmt.Errorf("%w: no LoRA tensor pairs", ErrInvalid)
	}
	seen := map[string]bool{}
	for _, p := range a.Pairs {
		if seen[p.Base] {
			return fmt.Errorf("%w: %s adapted twice", ErrInvalid, p.Base)
		}
		seen[p.Base] = true
		if strings.HasSuffix(p.Base, "token_embd.weight") {
			return fmt.Errorf("%w: adapter on %s (llama.cpp stores it transposed)", ErrUnsupported, p.Base)
		}
		if err := p.check(); err != nil {
			return err
		}
	}
	return nil
}

// Clone returns a deep copy.
func (a *Adapter) Clone() *Adapter {
	c := &Adapter{Arch: a.Arch, Alpha: a.Alpha, Meta: map[string]string{}}
	for k, v := range a.Meta {
		c.Meta[k] = v
	}
	for _, p := range a.Pairs {
		q := *p
		q.A = append([]float32(nil), p.A...)
		q.B = append([]float32(nil), p.B...)
		c.Pairs = append(c.Pairs, &q)
	}
	return c
}

// Delta returns s·B·A as a row-major Out×In matrix (the same layout as the
// base weight's data), accumulated in float64.
func (a *Adapter) Delta(p *Pair) []float64 {
	s := float64(a.Scale(p.Rank))
	d := make([]float64, p.Out*p.In)
	for o := 0; o < p.Out; o++ {
		row := d[o*p.In : (o+1)*p.In]
		for k := 0; k < p.Rank; k++ {
			b := s * float64(p.B[o*p.Rank+k])
			if b == 0 {
				continue
			}
			ak := p.A[k*p.In : (k+1)*p.In]
			for i, x := range ak {
				row[i] += b * float64(x)
			}
		}
	}
	return d
}
