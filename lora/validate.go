package lora

import (
	"fmt"

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
