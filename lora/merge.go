package lora

import (
	"fmt"
	"io"

	"github.com/empo2/empo2/gguf"
)

// Merge writes to outPath a full model GGUF equal to base with every adapted
// weight replaced by W + s·B·A (s = Adapter.Scale(r); computed in float64,
// stored in typ, gguf.TypeF32 or gguf.TypeF16). All other tensors are copied
// byte for byte and all metadata is copied in order, so llama.cpp loads the
// result as it loads base, and its outputs equal base + adapter at scale 1.
// The adapter is validated against base first; adapted base tensors must be
// F32, F16 or BF16 (quantized weights are not dequantized here).
func Merge(base *gguf.File, a *Adapter, outPath string, typ gguf.GGMLType) error {
	if typ != gguf.TypeF32 && typ != gguf.TypeF16 {
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
	w.Alignment = base.Alignment
	for _, k := range base.Keys() {
		if k == gguf.KeyAlignment {
			continue // the writer writes it from Alignment
		}
		v, _ := base.Get(k)
		w.AddKV(k, v)
	}
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
			err = w.AddTensorFunc(name, ti.Shape, typ, func(out io.Writer) error {
				wv, err := base.ReadTensorF32(name)
				if err != nil {
					return err
				}
				merged := make([]float32, len(wv))
				for i, d := range a.Delta(p) {
					merged[i] = float32(float64(wv[i]) + d)
				}
				if typ == gguf.TypeF16 {
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
