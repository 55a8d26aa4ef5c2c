package lora

import (
	"fmt"
	"io"
	"math"

	"github.com/empo2/empo2/gguf"
)

// KeepType asks Merge to store every merged weight in its base tensor's
// type: F32 stays F32, F16 stays F16, and BF16 becomes F32 (the writer has
// no BF16 encoder, and F32 holds every BF16 value exactly, unlike F16).
const KeepType gguf.GGMLType = math.MaxUint32

// mergedType is the type a merged weight of base type bt is stored in.
func mergedType(typ, bt gguf.GGMLType) gguf.GGMLType {
	if typ != KeepType {
		return typ
	}
	if bt == gguf.TypeF16 {
		return gguf.TypeF16
	}
	return gguf.TypeF32
}

// Merge writes to outPath a full model GGUF equal to base with every adapted
// weight replaced by W + s·B·A (s = Adapter.Scale(r); computed in float64,
// stored in typ, gguf.TypeF32 or gguf.TypeF16, or KeepType for the base
// tensor's own type). A merged value that does not fit the stored type
// (non-finite, or beyond F16's ±65504) fails the merge; outPath is then
// left untouched. All other tensors are copied
// byte for byte and all metadata is copied in order, so llama.cpp loads the
// result as it loads base, and its outputs equal base + adapter at scale 1.
// The adapter is validated against base first; adapted base tensors must be
// F32, F16 or BF16 (quantized weights are not dequantized here).
func Merge(base *gguf.File, a *Adapter, outPath string, typ gguf.GGMLType) error {
	if typ != gguf.TypeF32 && typ != gguf.TypeF16 && typ != KeepType {
		return fmt.Errorf("%w: merged tensor type %s (want F32 or F16)", ErrConfig, typ)
	}
	if err := Validate(a, base); err != nil {
		return err
	}
	for _, p := range a.Pairs {
		ti, _ := base.Tensor(p.Base)
		if ti.Type != gguf.TypeF32 && ti.Type != gguf.TypeF16 && ti.Type != gguf.TypeBF16 {
			return fmt.Errorf("%w: cannot merge into %s of type %s (F32, F16, BF16 only)", ErrUnsupported, p.Base, ti.Type)
		}
	}
	w := gguf.NewWriter()
	w.CopyMetadata(base)
	for _, ti := range base.Tensors {
		name := ti.Name
		p := a.Pair(name)
		var err error
		if p == nil {
			err = w.AddTensorFunc(name, ti.Shape, ti.Type, func(out io.Writer) error {
				raw, err := base.ReadTensorRaw(name)
				if err != nil {
					return err
				}
				_, err = out.Write(raw)
				return err
			})
		} else {
			mt := mergedType(typ, ti.Type)
			limit := math.MaxFloat32
			if mt == gguf.TypeF16 {
				limit = 65504 // largest finite F16
			}
			err = w.AddTensorFunc(name, ti.Shape, mt, func(out io.Writer) error {
				wv, err := base.ReadTensorF32(name)
				if err != nil {
					return err
				}
				merged := make([]float32, len(wv))
				for i, d := range a.Delta(p) {
					v := float64(wv[i]) + d
					if !(math.Abs(v) <= limit) {
						return fmt.Errorf("%w: merged %s[%d] = %g does not fit %s", ErrInvalid, name, i, v, mt)
					}
					merged[i] = float32(v)
				}
				if mt == gguf.TypeF16 {
					_, err = out.Write(gguf.EncodeF16(merged))
				} else {
					_, err = out.Write(gguf.EncodeF32(merged))
				}
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("lora: merging %s: %w", name, err)
		}
	}
	if err := w.WriteFile(outPath); err != nil {
		return fmt.Errorf("lora: writing merged model %s: %w", outPath, err)
	}
	return nil
}

// MergeFiles merges the adapter file into the base model file (see Merge).
func MergeFiles(basePath, adapterPath, outPath string, typ gguf.GGMLType) error {
	base, err := gguf.Open(basePath)
	if err != nil {
		return fmt.Errorf("lora: reading base model %s: %w", basePath, err)
	}
	defer base.Close()
	a, err := Read(adapterPath)
	if err != nil {
		return err
	}
	if err := Merge(base, a, outPath, typ); err != nil {
		return fmt.Errorf("%s + %s: %w", basePath, adapterPath, err)
	}
	return nil
}
