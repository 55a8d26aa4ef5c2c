package llama

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/gguf"
)

var adaptedNames = []string{"blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.0.ffn_down.weight", "blk.1.ffn_up.weight", "output.weight"}

// TestAdapterMatchesMerged checks base+adapter logits against a model with
// W + s·B·A merged in Go, for an adapter attached after the context already
// decoded (graph reuse), for a rescaled adapter, and after SetTensor.
func TestAdapterMatchesMerged(t *testing.T) {
	const r, alpha = 4, 8.0
	dir := t.TempDir()
	pairs := randomPairs(t, tinyPath, adaptedNames, r, 0.3, 1)
	adPath := filepath.Join(dir, "adapter.gguf")
	writeAdapter(t, adPath, "qwen2", alpha, r, pairs)

	m := loadTiny(t)
	prompt := testPrompt(t, m)
	c := newCtx(t, m, ContextParams{NCtx: 256})
	base, err := c.Logits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := m.LoadAdapter(adPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	if len(ad.Tensors()) != 2*len(pairs) || ad.Alpha() != alpha {
		t.Fatalf("adapter has %d tensors, alpha %v", len(ad.Tensors()), ad.Alpha())
	}

	expect := func(scale float32, ps []loraPair) []float32 {
		t.Helper()
		path := filepath.Join(dir, "merged.gguf")
		writeMerged(t, tinyPath, path, alpha, scale, r, ps)
		mm, err := LoadModel(path, ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		defer mm.Close()
		mc, err := NewContext(mm, ContextParams{NCtx: 256, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Close()
		l, err := mc.Logits(prompt)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	check := func(what string, want []float32) {
		t.Helper()
		got, err := c.Logits(prompt)
		if err != nil {
			t.Fatal(err)
		}
		d := maxAbsDiff(got, want)
		if d > 1e-4 { // observed ~2e-6 against changes of 2–5
			t.Fatalf("%s: logits differ from the merged model by %g (change from base %g)", what, d, maxAbsDiff(want, base))
		}
		t.Logf("%s: max |adapter - merged| = %.2g, |merged - base| = %.2g", what, d, maxAbsDiff(want, base))
	}

	merged1 := expect(1, pairs)
	if maxAbsDiff(merged1, base) < 0.05 {
		t.Fatalf("test adapter too weak: merged differs from base by %g", maxAbsDiff(merged1, base))
	}
	if err := c.SetAdapter(ad, 1); err != nil {
		t.Fatal(err)
	}
	check("attach scale 1", merged1)

	if err := c.SetAdapter(ad, 0.5); err != nil {
		t.Fatal(err)
	}
	check("rescale 0.5", expect(0.5, pairs))
	if err := c.SetAdapter(ad, float32(math.NaN())); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NaN scale: %v", err)
	}
	check("after a refused NaN scale", expect(0.5, pairs))

	// new weights in place
	pairs2 := randomPairs(t, tinyPath, adaptedNames, r, 0.3, 2)
	for _, p := range pairs2 {
		if err := ad.SetTensor(p.base+".lora_a", p.a); err != nil {
			t.Fatal(err)
		}
		if err := ad.SetTensor(p.base+".lora_b", p.b); err != nil {
			t.Fatal(err)
		}
	}
	back, err := ad.Tensor(pairs2[1].base + ".lora_b")
	if err != nil || maxAbsDiff(back, pairs2[1].b) != 0 {
		t.Fatalf("Tensor read-back differs (%v)", err)
	}
	check("SetTensor", expect(0.5, pairs2))

	if err := c.RemoveAdapter(ad); err != nil {
		t.Fatal(err)
	}
	check("detached", base)

	// shape and name guards
	if err := ad.SetTensor(pairs2[0].base+".lora_a", pairs2[0].a[1:]); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("short data: %v", err)
	}
	if err := ad.SetTensor("blk.9.attn_q.weight.lora_a", pairs2[0].a); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("unknown tensor: %v", err)
	}
}

func TestAdapterBadFiles(t *testing.T) {
	dir := t.TempDir()
	m := loadTiny(t)
	pairs := randomPairs(t, tinyPath, adaptedNames[:1], 2, 0.1, 3)

	wrongArch := filepath.Join(dir, "llama-arch.gguf")
	writeAdapter(t, wrongArch, "llama", 2, 2, pairs)
	if _, err := m.LoadAdapter(wrongArch); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("wrong architecture: %v", err)
	}

	// lora_a with the wrong input size
	bad := pairs[0]
	bad.nIn--
	bad.a = bad.a[:bad.nIn*2]
	wrongShape := filepath.Join(dir, "shape.gguf")
	writeAdapter(t, wrongShape, "qwen2", 2, 2, []loraPair{bad})
	if _, err := m.LoadAdapter(wrongShape); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("wrong shape: %v", err)
	}

	noBase := pairs[0]
	noBase.base = "blk.7.attn_q.weight"
	missing := filepath.Join(dir, "nobase.gguf")
	writeAdapter(t, missing, "qwen2", 2, 2, []loraPair{noBase})
	if _, err := m.LoadAdapter(missing); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("tensor absent from base: %v", err)
	}
	if _, err := m.LoadAdapter(filepath.Join(dir, "nope.gguf")); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := m.LoadAdapter(tinyPath); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("a model file as adapter: %v", err)
	}
	// an adapter of another model cannot be attached
	other := loadTiny(t)
	good := filepath.Join(dir, "good.gguf")
	writeAdapter(t, good, "qwen2", 2, 2, pairs)
	ad, err := other.LoadAdapter(good)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	c := newCtx(t, m, ContextParams{NCtx: 256})
	if err := c.SetAdapter(ad, 1); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("adapter of another model: %v", err)
	}
}

// TestAdapterF16 loads an adapter stored as F16: SetTensor converts, and the
// logits match an F32 adapter holding the same (F16-rounded) values.
func TestAdapterF16(t *testing.T) {
	dir := t.TempDir()
	pairs := randomPairs(t, tinyPath, adaptedNames[:2], 2, 0.3, 11)
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", float32(2))
	for _, p := range pairs {
		for i := range p.a {
			p.a[i] = gguf.F16ToF32(gguf.F32ToF16(p.a[i]))
		}
		for i := range p.b {
			p.b[i] = gguf.F16ToF32(gguf.F32ToF16(p.b[i]))
		}
		if err := w.AddTensorF16(p.base+".lora_a", []uint64{uint64(p.nIn), 2}, p.a); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensorF16(p.base+".lora_b", []uint64{2, uint64(p.nOut)}, p.b); err != nil {
			t.Fatal(err)
		}
	}
	f16Path := filepath.Join(dir, "f16.gguf")
	if err := w.WriteFile(f16Path); err != nil {
		t.Fatal(err)
	}
	f32Path := filepath.Join(dir, "f32.gguf")
	writeAdapter(t, f32Path, "qwen2", 2, 2, pairs)

	m := loadTiny(t)
	prompt := testPrompt(t, m)
	logitsWith := func(path string, set bool) []float32 {
		ad, err := m.LoadAdapter(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ad.Close()
		if set { // overwrite with the same values through SetTensor
			for _, p := range pairs {
				if err := ad.SetTensor(p.base+".lora_b", p.b); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ad.Tensor(pairs[0].base + ".lora_b")
			if err != nil || maxAbsDiff(got, pairs[0].b) != 0 {
				t.Fatalf("F16 read-back differs (%v)", err)
			}
		}
		c := newCtx(t, m, ContextParams{NCtx: 256})
		if err := c.SetAdapter(ad, 1); err != nil {
			t.Fatal(err)
		}
		l, err := c.Logits(prompt)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	want := logitsWith(f32Path, false)
	for _, set := range []bool{false, true} {
		if d := maxAbsDiff(logitsWith(f16Path, set), want); d > 1e-3 {
			t.Fatalf("F16 adapter (SetTensor %v) differs from F32 by %g", set, d)
		}
	}
	ad, err := m.LoadAdapter(f16Path)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	for _, ti := range ad.Tensors() {
		if ti.Type != "f16" {
			t.Fatalf("tensor %s type %s", ti.Name, ti.Type)
		}
	}
}

// TestAdapterKeyTypes: adapter keys of another GGUF type than llama.cpp's
// loader reads them as (its getters abort the process) are refused first.
func TestAdapterKeyTypes(t *testing.T) {
	dir := t.TempDir()
	pairs := randomPairs(t, tinyPath, adaptedNames[:1], 2, 0.3, 11)
	m := loadTiny(t)
	for _, kv := range []struct {
		key string
		val any
	}{{"adapter.lora.alpha", float64(2)}, {"general.type", uint32(1)}, {"adapter.type", []string{"lora"}}} {
		w := gguf.NewWriter()
		w.AddKV("general.type", "adapter")
		w.AddKV("general.architecture", "qwen2")
		w.AddKV("adapter.type", "lora")
		w.AddKV("adapter.lora.alpha", float32(2))
		w.AddKV(kv.key, kv.val)
		for _, p := range pairs {
			if err := w.AddTensorF32(p.base+".lora_a", []uint64{uint64(p.nIn), 2}, p.a); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensorF32(p.base+".lora_b", []uint64{2, uint64(p.nOut)}, p.b); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, "bad.gguf")
		if err := w.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		if _, err := m.LoadAdapter(path); !errors.Is(err, ErrBadAdapter) {
			t.Fatalf("%s = %T: %v", kv.key, kv.val, err)
		}
	}
}

// TestAdapterEmptyDim: a tensor with an empty dimension after the first
// (which crashes llama.cpp's GGUF reader with a division by zero) is refused.
func TestAdapterEmptyDim(t *testing.T) {
	pairs := randomPairs(t, tinyPath, adaptedNames[:1], 2, 0.3, 11)
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", float32(2))
	for _, p := range pairs {
		if err := w.AddTensorF32(p.base+".lora_a", []uint64{uint64(p.nIn), 0}, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensorF32(p.base+".lora_b", []uint64{0, uint64(p.nOut)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "empty.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTiny(t).LoadAdapter(path); !errors.Is(err, ErrBadAdapter) {
		t.Fatalf("rank-0 adapter: %v", err)
	}
}
