package lora

import "fmt"

// halves pairs the A and B tensors of an adapter file by module, in the
// order the modules first appear: GGUF adapters (Read) and PEFT
// safetensors (ReadPEFT) both store a module's two matrices as separate
// tensors in any order.
type halves[T any] struct {
	byBase map[string]*[2]*T // [A, B]
	order  []string
}

// add files t as module base's B matrix when isB, else as its A.
func (h *halves[T]) add(base string, isB bool, t *T) {
	if h.byBase == nil {
		h.byBase = map[string]*[2]*T{}
	}
	p := h.byBase[base]
	if p == nil {
		p = &[2]*T{}
		h.byBase[base] = p
		h.order = append(h.order, base)
	}
	if isB {
		p[1] = t
	} else {
		p[0] = t
	}
}

// len is the number of modules seen.
func (h *halves[T]) len() int { return len(h.order) }

// each calls f with every module's A and B in order; a module missing one
// half is ErrInvalid.
func (h *halves[T]) each(f func(base string, a, b *T) error) error {
	for _, base := range h.order {
		p := h.byBase[base]
		if p[0] == nil || p[1] == nil {
			return fmt.Errorf("%w: LoRA pair for %q is missing one half", ErrInvalid, base)
		}
		if err := f(base, p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}
