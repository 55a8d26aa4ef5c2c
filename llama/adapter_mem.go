package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "adapter_mem.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/empo2/empo2/lora"
)

// cPairs lays out a's pairs as C structs in Go memory that holds the pinned
// Go pointers of the float data and C strings (legal to pass to C while
// pinned); everything stays valid until free is called. Not C.malloc:
// storing a Go pointer into uninitialized C memory runs the GC write barrier
// on the garbage it overwrites, and leaves Go pointers in the C heap after
// C.free — stale words that later read as heap pointers make the GC mark
// free objects ("found pointer to free object"; golang/go#19928).
func cPairs(a *lora.Adapter) (pairs *C.struct_empo2_lora_pair, n int, free func()) {
	n = len(a.Pairs)
	ps := make([]C.struct_empo2_lora_pair, max(1, n))
	var pin runtime.Pinner
	names := make([]*C.char, n)
	for i, p := range a.Pairs {
		names[i] = C.CString(p.Base)
		pin.Pin(&p.A[0])
		pin.Pin(&p.B[0])
		ps[i] = C.struct_empo2_lora_pair{
			base: names[i], n_in: C.int64_t(p.In), n_out: C.int64_t(p.Out), rank: C.int64_t(p.Rank),
			a: (*C.float)(unsafe.Pointer(&p.A[0])), b: (*C.float)(unsafe.Pointer(&p.B[0])),
		}
	}
	return &ps[0], n, func() {
		pin.Unpin()
		for _, s := range names {
			C.free(unsafe.Pointer(s))
		}
		runtime.KeepAlive(ps)
	}
}

// NewAdapter creates a LoRA adapter for m from memory — the same object
// LoadAdapter makes from a file (F32 tensors in the buffer type of each base
// weight, as llama_adapter_lora_init places them), without writing or
// reading a file. a must pass lora's own checks (Check) and fit m: same
// architecture, every base tensor present with ne [In, Out]. The adapter's
// tensors can later be replaced with SetTensor/SetTensors. Path() is "".
func (m *Model) NewAdapter(a *lora.Adapter) (*Adapter, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: nil adapter", ErrBadAdapter)
	}
	if err := a.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAdapter, err)
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	if arch := m.info.Arch; a.Arch != arch {
		m.release()
		return nil, fmt.Errorf("%w: adapter architecture %q, model %q", ErrBadAdapter, a.Arch, arch)
	}
	a.Sort()
	pairs, n, free := cPairs(a)
	defer free()
	var errbuf [512]C.char
	ca := C.empo2_lora_from_memory(m.c, C.float(a.Alpha), pairs, C.int(n), &errbuf[0], C.int(len(errbuf)))
	if ca == nil {
		m.release()
		return nil, fmt.Errorf("%w: %s", ErrBadAdapter, C.GoString(&errbuf[0]))
	}
	ad := &Adapter{c: ca, model: m, shapes: map[string]AdapterTensor{}, alpha: a.Alpha}
	for _, p := range a.Pairs {
		ad.shapes[p.NameA()] = AdapterTensor{Name: p.NameA(), Shape: []int64{int64(p.In), int64(p.Rank)}, Type: "f32"}
		ad.shapes[p.NameB()] = AdapterTensor{Name: p.NameB(), Shape: []int64{int64(p.Rank), int64(p.Out)}, Type: "f32"}
	}
	runtime.SetFinalizer(ad, func(a *Adapter) { a.free() })
	return ad, nil
}

// SetTensors replaces every tensor of the adapter with src's values in one
// step: src must hold exactly the adapter's pairs with the same shapes
// (alpha is not changed). All writes happen under the adapter's write lock,
// so a decode on any context using the adapter sees either the old or the
// new adapter, never a mix; decodes in progress finish first. Nothing is
// written when a check fails.
func (a *Adapter) SetTensors(src *lora.Adapter) error {
	if src == nil {
		return fmt.Errorf("%w: nil adapter", ErrBadAdapter)
	}
	if 2*len(src.Pairs) != len(a.shapes) {
		return fmt.Errorf("%w: %d tensors given, the adapter has %d", ErrBadAdapter, 2*len(src.Pairs), len(a.shapes))
	}
	for _, p := range src.Pairs {
		for _, c := range []struct {
			name  string
			shape []int64
			n     int
		}{{p.NameA(), []int64{int64(p.In), int64(p.Rank)}, len(p.A)}, {p.NameB(), []int64{int64(p.Rank), int64(p.Out)}, len(p.B)}} {
			t, ok := a.shapes[c.name]
			if !ok {
				return fmt.Errorf("%w: no tensor %q in adapter", ErrBadAdapter, c.name)
			}
			if len(t.Shape) != 2 || t.Shape[0] != c.shape[0] || t.Shape[1] != c.shape[1] || int64(c.n) != numel(t.Shape) {
				return fmt.Errorf("%w: %q has shape %v, got %v (%d values)", ErrBadAdapter, c.name, t.Shape, c.shape, c.n)
			}
		}
	}
	if err := a.acquire(); err != nil {
		return err
	}
	defer a.release()
	pairs, n, free := cPairs(src)
	defer free()
	a.mu.Lock()
	rc := C.empo2_lora_set_all(a.c, pairs, C.int(n))
	a.gen.Add(1)
	a.mu.Unlock()
	if rc != 0 {
		return fmt.Errorf("%w: writing the adapter failed (%d)", ErrBadAdapter, int(rc))
	}
	return nil
}
