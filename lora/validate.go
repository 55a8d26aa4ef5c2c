package lora

import (
	"fmt"
	"math"

	"github.com/empo2/empo2/gguf"
)

// Validate checks the adapter against the base model the way llama.cpp's
// loader does (architecture, every adapted tensor exists, W.ne[0] = in,
// W.ne[1] = out), after the adapter's own checks (Check: pairs complete,
// rank consistent, values finite).
func Validate(a *Adapter, base *gguf.File) error {
	if err := a.Check(); err != nil {
		return err
	}
	if gt, ok := base.String(KeyGeneralType); ok && gt == "adapter" {
		return fmt.Errorf("%w: %s is an adapter, not a base model", ErrMismatch, base.Path)
	}
	arch, _ := base.String(KeyArchitecture)
	if arch != a.Arch {
		return fmt.Errorf("%w: adapter architecture %q, base model %q", ErrMismatch, a.Arch, arch)
	}
	if err := checkDeltaFinite(a); err != nil {
		return err
	}
	for _, p := range a.Pairs {
		w, ok := base.Tensor(p.Base)
		if !ok {
			return fmt.Errorf("%w: adapted tensor %q does not exist in the base model", ErrMismatch, p.Base)
		}
		if len(w.Shape) != 2 || w.Shape[0] != uint64(p.In) || w.Shape[1] != uint64(p.Out) {
			return fmt.Errorf("%w: %s: base shape %v, adapter needs [%d %d] (lora_a [%d %d], lora_b [%d %d])",
				ErrMismatch, p.Base, w.Shape, p.In, p.Out, p.In, p.Rank, p.Rank, p.Out)
		}
	}
	return nil
}

// ValidateFiles reads the adapter at adapterPath and validates it against
// the base model at basePath.
func ValidateFiles(adapterPath, basePath string) (*Adapter, error) {
	base, err := gguf.Open(basePath)
	if err != nil {
		return nil, fmt.Errorf("lora: reading base model %s: %w", basePath, err)
	}
	defer base.Close()
	a, err := Read(adapterPath)
	if err != nil {
		return nil, err
	}
	if err := Validate(a, base); err != nil {
		return nil, fmt.Errorf("%s against %s: %w", adapterPath, basePath, err)
	}
	return a, nil
}

// maxDelta bounds an element of the update ΔW = s·B·A: √MaxFloat32. A
// weight beyond it makes llama.cpp's float32 activations non-finite even
// for unit inputs, since the next RMSNorm (Σx²) and attention logits (q·k)
// square them (alpha 1e30 gave NaN logits and a NaN merge).
const maxDelta = 1.8e19

// checkDeltaFinite refuses an adapter whose update s·B·A is too large for
// float32 inference (maxDelta). It bounds each element of ΔW without
// forming it: |ΔW_oi| = |s·Σ_k B_ok·A_ki| ≤ |s|·Σ_k max_o|B_ok|·max_i|A_ki|,
// in O(size of the adapter).
func checkDeltaFinite(a *Adapter) error {
	for _, p := range a.Pairs {
		s := math.Abs(float64(a.Scale(p.Rank)))
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: %s: scale alpha/r = %v is not finite", ErrInvalid, p.Base, s)
		}
		var bound float64
		for k := 0; k < p.Rank; k++ {
			var maxA, maxB float64
			for _, x := range p.A[k*p.In : (k+1)*p.In] {
				maxA = math.Max(maxA, math.Abs(float64(x)))
			}
			for o := 0; o < p.Out; o++ {
				maxB = math.Max(maxB, math.Abs(float64(p.B[o*p.Rank+k])))
			}
			bound += maxA * maxB
		}
		if bound *= s; bound > maxDelta {
			return fmt.Errorf("%w: %s: alpha %g makes the update alpha/r·B·A as large as %.3g (limit %.2g): llama.cpp's output and a merged model would be non-finite",
				ErrInvalid, p.Base, a.Alpha, bound, maxDelta)
		}
	}
	return nil
}
