package lora

import (
	"fmt"
	"sort"
	"strings"

	"github.com/empo2/empo2/gguf"
)

// Read opens and parses the adapter GGUF at path. It checks the adapter on
// its own (Check); use Validate to check it against a base model.
func Read(path string) (*Adapter, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lora: reading adapter %s: %w", path, err)
	}
	defer f.Close()
	a, err := FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// FromGGUF parses an open adapter GGUF with llama.cpp's rules (see the
// package documentation) and checks the result with Check.
func FromGGUF(f *gguf.File) (*Adapter, error) {
	return FromGGUFWith(f, ReadOptions{})
}

// ReadOptions lets other file kinds embed an adapter (the trainer's state
// file does): a different general.type and extra tensors to skip.
type ReadOptions struct {
	GeneralType string            // expected general.type; "" means "adapter"
	Skip        func(string) bool // tensors for which Skip(name) is true are ignored
}

// FromGGUFWith is FromGGUF with options.
func FromGGUFWith(f *gguf.File, opt ReadOptions) (*Adapter, error) {
	wantType := opt.GeneralType
	if wantType == "" {
		wantType = "adapter"
	}
	gt, _ := f.String(KeyGeneralType)
	if gt != wantType {
		return nil, fmt.Errorf("%w: %s is %q, want %q", ErrNotAdapter, KeyGeneralType, gt, wantType)
	}
	at, _ := f.String(KeyAdapterType)
	if at != "lora" {
		return nil, fmt.Errorf("%w: %s is %q, want \"lora\"", ErrNotAdapter, KeyAdapterType, at)
	}
	arch, _ := f.String(KeyArchitecture)
	if arch == "" {
		return nil, fmt.Errorf("%w: no %s", ErrInvalid, KeyArchitecture)
	}
	a := &Adapter{Arch: arch, Meta: map[string]string{}}
	if err := CheckKeyTypes(f); err != nil {
		return nil, err
	}
	a.Alpha, _ = f.Float32(KeyAlpha) // f32 or absent (0)
	for _, k := range f.Keys() {
		if reservedKey(k) {
			continue
		}
		if s, ok := f.String(k); ok {
			a.Meta[k] = s
		}
	}
	var pairs halves[gguf.TensorInfo]
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if opt.Skip != nil && opt.Skip(ti.Name) {
			continue
		}
		base, isB, ok := SplitName(ti.Name)
		if !ok {
			if strings.HasSuffix(ti.Name, "_norm.weight") {
				continue // llama.cpp skips these too
			}
			return nil, fmt.Errorf("%w: tensor %q has neither a .lora_a nor a .lora_b suffix", ErrNotAdapter, ti.Name)
		}
		pairs.add(base, isB, ti)
	}
	if err := pairs.each(func(base string, ha, hb *gguf.TensorInfo) error {
		for _, ti := range []*gguf.TensorInfo{ha, hb} {
			if len(ti.Shape) != 2 {
				return fmt.Errorf("%w: %s has shape %v, want 2-D", ErrInvalid, ti.Name, ti.Shape)
			}
			if ti.Type != gguf.TypeF32 && ti.Type != gguf.TypeF16 && ti.Type != gguf.TypeBF16 {
				return fmt.Errorf("%w: %s is %s (F32, F16 and BF16 are read)", ErrUnsupported, ti.Name, ti.Type)
			}
		}
		in, rank := ha.Shape[0], ha.Shape[1]
		rb, out := hb.Shape[0], hb.Shape[1]
		if rank != rb {
			return fmt.Errorf("%w: %s: lora_a ne %v and lora_b ne %v disagree on the rank (lora_a must be [in, r], lora_b [r, out])",
				ErrInvalid, base, ha.Shape, hb.Shape)
		}
		const maxDim = 1 << 24
		if in == 0 || rank == 0 || out == 0 || in > maxDim || rank > maxDim || out > maxDim {
			return fmt.Errorf("%w: %s: dimensions in=%d out=%d rank=%d", ErrInvalid, base, in, out, rank)
		}
		p := &Pair{Base: base, In: int(in), Out: int(out), Rank: int(rank)}
		var err error
		if p.A, err = f.ReadTensorF32(ha.Name); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		if p.B, err = f.ReadTensorF32(hb.Name); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		a.Pairs = append(a.Pairs, p)
		return nil
	}); err != nil {
		return nil, err
	}
	a.Sort()
	if err := a.Check(); err != nil {
		return nil, err
	}
	return a, nil
}

// CheckKeyTypes reports an adapter key stored with another GGUF type than
// the one llama.cpp's adapter loader reads it as: it reads general.type,
// general.architecture and adapter.type with gguf_get_val_str and
// adapter.lora.alpha with gguf_get_val_f32, which abort the process on any
// other type. Absent keys are fine here.
func CheckKeyTypes(f *gguf.File) error {
	for _, k := range []struct {
		key  string
		want gguf.ValueType
	}{{KeyGeneralType, gguf.ValString}, {KeyArchitecture, gguf.ValString}, {KeyAdapterType, gguf.ValString}, {KeyAlpha, gguf.ValFloat32}} {
		if vt, isArr, ok := f.ValueType(k.key); ok && (vt != k.want || isArr) {
			return fmt.Errorf("%w: %s has type %s, llama.cpp requires %s", ErrInvalid, k.key, vt, k.want)
		}
	}
	return nil
}

func reservedKey(k string) bool {
	switch k {
	case KeyGeneralType, KeyArchitecture, KeyAdapterType, KeyAlpha, gguf.KeyAlignment:
		return true
	}
	return false
}

// AddTo adds the adapter's metadata and tensors to w, with tensors in typ
// (gguf.TypeF32 or gguf.TypeF16). The state file reuses it to embed the
// adapter.
func (a *Adapter) AddTo(w *gguf.Writer, typ gguf.GGMLType) error {
	if err := a.Check(); err != nil {
		return err
	}
	if typ != gguf.TypeF32 && typ != gguf.TypeF16 {
		return fmt.Errorf("%w: adapter tensor type %s (want F32 or F16)", ErrConfig, typ)
	}
	a.Sort()
	w.AddKV(KeyGeneralType, "adapter")
	w.AddKV(KeyArchitecture, a.Arch)
	w.AddKV(KeyAdapterType, "lora")
	w.AddKV(KeyAlpha, a.Alpha)
	keys := make([]string, 0, len(a.Meta))
	for k := range a.Meta {
		if !reservedKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.AddKV(k, a.Meta[k])
	}
	for _, p := range a.Pairs {
		shA := []uint64{uint64(p.In), uint64(p.Rank)}
		shB := []uint64{uint64(p.Rank), uint64(p.Out)}
		var err error
		if typ == gguf.TypeF16 {
			if err = w.AddTensorF16(p.NameA(), shA, p.A); err == nil {
				err = w.AddTensorF16(p.NameB(), shB, p.B)
			}
		} else {
			if err = w.AddTensorF32(p.NameA(), shA, p.A); err == nil {
				err = w.AddTensorF32(p.NameB(), shB, p.B)
			}
		}
		if err != nil {
			return fmt.Errorf("lora: adding %s: %w", p.Base, err)
		}
	}
	return nil
}

// Write writes the adapter to path atomically, tensors in typ (gguf.TypeF32
// or gguf.TypeF16).
func (a *Adapter) Write(path string, typ gguf.GGMLType) error {
	w := gguf.NewWriter()
	if err := a.AddTo(w, typ); err != nil {
		return err
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("lora: writing %s: %w", path, err)
	}
	return nil
}
