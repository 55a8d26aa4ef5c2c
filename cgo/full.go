package cgo

/*
#include "empo_train.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/empo2/empo2/gguf"
)

// Full training (`empo2 sft --full`): every weight of a small F32 model is
// a parameter — token_embd, output_norm, output (when untied; tied, the one
// token_embd gets the gradients of the lookup and of the head), and per
// block attn_norm, ffn_norm, the q/k/v biases and the seven matrices. There
// is no LoRA. The parameters live in the optimizer's flat buffer beside
// their gradients and AdamW moments, so training takes 4× the model's F32
// size (parameters, gradients, m, v) plus the compute buffer. SaveFull
// writes the trained weights as a new base GGUF.

// LoadFull reads a Qwen2 GGUF whose tensors are all F32 and makes every
// tensor a trainable parameter (no LoRA). A tensor of another type is
// refused with ErrConfig naming it; a tensor the graph does not use, with
// ErrUnsupportedArch. Options: Threads, Device and MaxTokens as for Load;
// AutogradFrozenBackward computes dX through every matrix with autograd's
// OUT_PROD (reference, slower) instead of MUL_MAT with a transpose of the
// current W made inside the graph (the default; no stored copies, which
// would go stale); TransposeInGraph is implied.
//
// Params() lists the tensors in the GGUF file's order: Name and Base are the
// GGUF tensor name, Shape its ggml ne ([n, 1] for vectors), Layer the block
// index or −1, Target "" and IsB false. ReadParams, WriteParams, Grads,
// Moments, SetMoments, AdamWStep and ZeroGrads work on them as on LoRA
// parameters; ReadAdapter and WriteAdapter return ErrConfig.
func LoadFull(path string, opts Options) (*Model, error) {
	return load(path, nil, LoRAConfig{}, opts, true)
}

// Full reports whether the model was made by LoadFull.
func (M *Model) Full() bool { return M != nil && M.m != nil && M.m.full }

// fullParams reads the C side's parameter metadata of a full-training model
// and checks it against the GGUF file: the same tensors, in the file's
// order, with the same shapes.
func (m *model) fullParams(n int) error {
	f, err := gguf.Open(m.path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	defer f.Close()
	if n != len(f.Tensors) {
		return fmt.Errorf("%w: %s: C reports %d parameters, the file has %d tensors", ErrBackend, m.path, n, len(f.Tensors))
	}
	for i := 0; i < n; i++ {
		var ci C.struct_empo_param_info
		if rc := C.empo_model_param_info(m.c, C.int(i), &ci); rc != C.EMPO_OK {
			return statusErr(rc, fmt.Sprintf("%s: parameter %d metadata", m.path, i))
		}
		pi := ParamInfo{Name: C.GoString(&ci.name[0]), Shape: [2]int{int(ci.ne[0]), int(ci.ne[1])}, Layer: int(ci.layer)}
		pi.Base = pi.Name
		ti := f.Tensors[i]
		if ti.Name != pi.Name || !sameShape(ti.Shape, pi.Shape) || int(ci.target) != -1 || ci.is_b != 0 || blockOf(pi.Name) != pi.Layer {
			return fmt.Errorf("%w: parameter %d: C reports %q %v (layer %d, target %d), the file has %q %v",
				ErrBackend, i, pi.Name, pi.Shape, pi.Layer, int(ci.target), ti.Name, ti.Shape)
		}
		m.params = append(m.params, pi)
	}
	return nil
}

// sameShape: a GGUF shape (ne0 first) and a parameter's [ne0, ne1].
func sameShape(s []uint64, p [2]int) bool {
	switch len(s) {
	case 1:
		return int(s[0]) == p[0] && p[1] == 1
	case 2:
		return int(s[0]) == p[0] && int(s[1]) == p[1]
	}
	return false
}

// blockOf is the block index of a tensor name "blk.<i>.…", −1 otherwise.
func blockOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	b, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(b)
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// SaveFull writes the model's current weights as a new base GGUF at path:
// the metadata of the GGUF the model was loaded from, in its order (the
// tokenizer, chat template and hyperparameters included), plus meta as
// string values (keys in sorted order, replacing any of the same name),
// and every tensor in the file's order with its trained F32 value, so
// llama.cpp loads it as it loads the original. Written atomically
// (gguf.Writer.WriteFile: temporary file in the same directory, rename);
// path may be the source file itself. ErrConfig for a LoRA model,
// ErrNonFinite when a weight is NaN or infinite (nothing is written).
func (M *Model) SaveFull(path string, meta map[string]string) error {
	if !M.Full() {
		return fmt.Errorf("%w: SaveFull needs a model loaded by LoadFull (a LoRA model's base is frozen)", ErrConfig)
	}
	vals, err := M.ReadParams()
	if err != nil {
		return err
	}
	infos := M.Params()
	for i, v := range vals {
		for j, x := range v {
			if !finite32(x) {
				return fmt.Errorf("%w: %s[%d] = %v", ErrNonFinite, infos[i].Name, j, x)
			}
		}
	}
	src, err := gguf.Open(M.m.path)
	if err != nil {
		return fmt.Errorf("%w: reading the metadata of %s: %w", ErrIO, M.m.path, err)
	}
	defer src.Close()
	if len(src.Tensors) != len(infos) {
		return fmt.Errorf("%w: %s now has %d tensors, the model %d", ErrShape, M.m.path, len(src.Tensors), len(infos))
	}
	w := gguf.NewWriter()
	w.CopyMetadata(src)
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.AddKV(k, meta[k])
	}
	for i, ti := range src.Tensors {
		if ti.Name != infos[i].Name || !sameShape(ti.Shape, infos[i].Shape) {
			return fmt.Errorf("%w: %s: tensor %d is %q %v, the model's %q %v", ErrShape, M.m.path, i, ti.Name, ti.Shape, infos[i].Name, infos[i].Shape)
		}
		if err := w.AddTensorF32(ti.Name, ti.Shape, vals[i]); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrIO, path, err)
	}
	return nil
}
