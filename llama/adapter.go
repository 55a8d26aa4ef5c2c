package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "internal.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// AdapterTensor describes one tensor of a LoRA adapter.
type AdapterTensor struct {
	// Name is the full tensor name, "<base weight>.lora_a" or ".lora_b".
	Name string
	// Shape in ggml ne order: lora_a is [n_in, rank], lora_b [rank, n_out].
	Shape []int64
	// Type is "f32" or "f16" (other types cannot be set).
	Type string
}

// Adapter is a LoRA adapter (llama_adapter_lora) loaded for one model. Its
// weights can be replaced in place with SetTensor, without reloading the
// base model or the adapter file. Safe for concurrent use.
type Adapter struct {
	mu     sync.RWMutex  // write: SetTensor; read: decodes of contexts using it
	gen    atomic.Uint64 // bumped by every SetTensor (invalidates prefix caches)
	refMu  sync.Mutex
	c      *C.struct_llama_adapter_lora
	model  *Model
	refs   int
	closed bool
	path   string
	shapes map[string]AdapterTensor
	alpha  float32
}

// LoadAdapter loads a llama.cpp LoRA adapter GGUF (general.type=adapter,
// adapter.type=lora) for model m. A missing or corrupt file, another
// architecture or tensors that do not match the model's shapes return an
// error wrapping ErrBadAdapter.
func (m *Model) LoadAdapter(path string) (*Adapter, error) {
	if err := m.acquire(); err != nil {
		return nil, err
	}
	if _, _, err := validateGGUF(path, true); err != nil {
		m.release()
		return nil, fmt.Errorf("%w: %v", ErrBadAdapter, err)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	ca := C.llama_adapter_lora_init(m.c, cpath)
	if ca == nil {
		m.release()
		return nil, fmt.Errorf("%w: %s: llama.cpp rejected the adapter (see log)", ErrBadAdapter, path)
	}
	a := &Adapter{c: ca, model: m, path: path, shapes: map[string]AdapterTensor{}, alpha: float32(C.empo2_lora_alpha(ca))}
	n := int(C.empo2_lora_count(ca))
	var name [512]C.char
	var ne [4]C.int64_t
	var typ C.int
	for i := 0; i < n; i++ {
		if C.empo2_lora_info(ca, C.int(i), &name[0], C.int(len(name)), &ne[0], &typ) != 0 {
			continue
		}
		t := AdapterTensor{Name: C.GoString(&name[0]), Type: ggmlTypeName(int(typ))}
		nd := 4
		for nd > 1 && ne[nd-1] == 1 {
			nd--
		}
		for d := 0; d < nd; d++ {
			t.Shape = append(t.Shape, int64(ne[d]))
		}
		a.shapes[t.Name] = t
	}
	runtime.SetFinalizer(a, func(a *Adapter) { a.free() })
	return a, nil
}

func ggmlTypeName(t int) string {
	switch t {
	case int(C.GGML_TYPE_F32):
		return "f32"
	case int(C.GGML_TYPE_F16):
		return "f16"
	default:
		return fmt.Sprintf("ggml_type(%d)", t)
	}
}

// Path is the file the adapter was loaded from.
func (a *Adapter) Path() string { return a.path }

// Alpha is adapter.lora.alpha; the effective scale of a pair is
// scale*alpha/rank (scale alone when alpha is 0).
func (a *Adapter) Alpha() float32 { return a.alpha }

// Tensors lists the adapter's tensors.
func (a *Adapter) Tensors() []AdapterTensor {
	out := make([]AdapterTensor, 0, len(a.shapes))
	for _, t := range a.shapes {
		out = append(out, t)
	}
	return out
}

// Tensor returns a copy of a tensor's values as float32, in ggml order.
func (a *Adapter) Tensor(name string) ([]float32, error) {
	t, ok := a.shapes[name]
	if !ok {
		return nil, fmt.Errorf("%w: no tensor %q", ErrBadAdapter, name)
	}
	if err := a.acquire(); err != nil {
		return nil, err
	}
	defer a.release()
	out := make([]float32, numel(t.Shape))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	a.mu.RLock()
	rc := C.empo2_lora_get(a.c, cname, (*C.float)(unsafe.Pointer(&out[0])), C.int64_t(len(out)))
	a.mu.RUnlock()
	if rc != 0 {
		return nil, fmt.Errorf("%w: reading %q failed (%d)", ErrBadAdapter, name, int(rc))
	}
	return out, nil
}

// SetTensor overwrites a tensor's values (float32 in ggml order, converted
// to the tensor's type). The shape is fixed by the loaded file: len(data)
// must equal the product of Shape. Calls on contexts using the adapter see
// the new weights from their next call on; a call in progress finishes with
// the old ones (SetTensor waits for it).
func (a *Adapter) SetTensor(name string, data []float32) error {
	t, ok := a.shapes[name]
	if !ok {
		return fmt.Errorf("%w: no tensor %q in adapter", ErrBadAdapter, name)
	}
	if int64(len(data)) != numel(t.Shape) {
		return fmt.Errorf("%w: %q has shape %v (%d values), got %d", ErrBadAdapter, name, t.Shape, numel(t.Shape), len(data))
	}
	if t.Type != "f32" && t.Type != "f16" {
		return fmt.Errorf("%w: %q has type %s", ErrBadAdapter, name, t.Type)
	}
	if err := a.acquire(); err != nil {
		return err
	}
	defer a.release()
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	a.mu.Lock()
	rc := C.empo2_lora_set(a.c, cname, (*C.float)(unsafe.Pointer(&data[0])), C.int64_t(len(data)))
	a.gen.Add(1)
	a.mu.Unlock()
	runtime.KeepAlive(data)
	if rc != 0 {
		return fmt.Errorf("%w: writing %q failed (%d)", ErrBadAdapter, name, int(rc))
	}
	return nil
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func (a *Adapter) acquire() error {
	if a == nil {
		return ErrClosed
	}
	a.refMu.Lock()
	defer a.refMu.Unlock()
	if a.closed || a.c == nil {
		return ErrClosed
	}
	a.refs++
	return nil
}

func (a *Adapter) release() {
	a.refMu.Lock()
	a.refs--
	free := a.closed && a.refs == 0
	a.refMu.Unlock()
	if free {
		a.free()
	}
}

func (a *Adapter) free() {
	a.refMu.Lock()
	defer a.refMu.Unlock()
	if a.c != nil {
		C.llama_adapter_lora_free(a.c)
		a.c = nil
		a.model.release()
	}
}

// Close releases the adapter. Idempotent and nil-safe; the C memory is
// freed once no context has it attached.
func (a *Adapter) Close() error {
	if a == nil {
		return nil
	}
	a.refMu.Lock()
	if a.closed {
		a.refMu.Unlock()
		return nil
	}
	a.closed = true
	free := a.refs == 0
	a.refMu.Unlock()
	if free {
		a.free()
		runtime.SetFinalizer(a, nil)
	}
	return nil
}
