package lora

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
)

// fakeBase writes a small GGUF shaped like a one-block Qwen2 model (only the
// tensors these tests need; llama.cpp round trips use modelgen models in the
// cmd/empo2 and trainer tests).
func fakeBase(t *testing.T, arch string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	w := gguf.NewWriter()
	w.AddKV("general.architecture", arch)
	w.AddKV("general.name", "fake")
	w.AddKV(arch+".block_count", uint32(1))
	w.AddKV("tokenizer.ggml.tokens", []string{"a", "b"})
	add := func(name string, shape ...uint64) {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(rng.NormFloat64())
		}
		if err := w.AddTensorF32(name, shape, data); err != nil {
			t.Fatal(err)
		}
	}
	add("token_embd.weight", 8, 16)
	add("blk.0.attn_norm.weight", 8)
	add("blk.0.attn_q.weight", 8, 8)
	add("blk.0.attn_k.weight", 8, 4)
	add("blk.0.attn_v.weight", 8, 4)
	add("blk.0.attn_output.weight", 8, 8)
	add("blk.0.ffn_gate.weight", 8, 12)
	add("blk.0.ffn_up.weight", 8, 12)
	add("blk.0.ffn_down.weight", 12, 8)
	add("output_norm.weight", 8)
	p := filepath.Join(t.TempDir(), arch+".gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func openT(t *testing.T, p string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestInitWriteReadRoundTrip(t *testing.T) {
	base := openT(t, fakeBase(t, "qwen2"))
	a, err := Init(base, InitConfig{Rank: 2, Alpha: 4, Seed: 1, RandomB: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Pairs) != 7 {
		t.Fatalf("%d pairs, want 7 (all targets of one block)", len(a.Pairs))
	}
	out := filepath.Join(t.TempDir(), "a.gguf")
	if err := a.Write(out, gguf.TypeF32); err != nil {
		t.Fatal(err)
	}
	// The file as llama.cpp sees it: metadata and ggml shapes.
	f := openT(t, out)
	for k, want := range map[string]string{"general.type": "adapter", "general.architecture": "qwen2", "adapter.type": "lora"} {
		if got, _ := f.String(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if al, ok := f.Float32("adapter.lora.alpha"); !ok || al != 4 {
		t.Errorf("adapter.lora.alpha = %v %v, want float32 4", al, ok)
	}
	if vt, _, _ := f.ValueType("adapter.lora.alpha"); vt != gguf.ValFloat32 {
		t.Errorf("alpha stored as %s; llama.cpp's gguf_get_val_f32 needs f32", vt)
	}
	ta, _ := f.Tensor("blk.0.ffn_down.weight.lora_a")
	tb, _ := f.Tensor("blk.0.ffn_down.weight.lora_b")
	// ffn_down W has ne = [12, 8]: lora_a ne = [12, r], lora_b ne = [r, 8].
	if !equalShape(ta.Shape, 12, 2) || !equalShape(tb.Shape, 2, 8) {
		t.Errorf("ffn_down lora_a ne %v, lora_b ne %v; want [12 2], [2 8]", ta.Shape, tb.Shape)
	}
	if len(f.Tensors) != 14 {
		t.Errorf("%d tensors in the adapter, want 14", len(f.Tensors))
	}
	b, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.Arch != a.Arch || b.Alpha != a.Alpha || len(b.Pairs) != len(a.Pairs) {
		t.Fatalf("read back %s/%v/%d pairs", b.Arch, b.Alpha, len(b.Pairs))
	}
	for i, p := range a.Pairs {
		q := b.Pairs[i]
		if p.Base != q.Base || p.In != q.In || p.Out != q.Out || p.Rank != q.Rank ||
			!bitsEqual(p.A, q.A) || !bitsEqual(p.B, q.B) {
			t.Errorf("pair %s changed in the round trip", p.Base)
		}
	}
	if err := Validate(b, base); err != nil {
		t.Errorf("valid adapter rejected: %v", err)
	}
}

func TestInitDistribution(t *testing.T) {
	base := openT(t, fakeBase(t, "qwen2"))
	a, err := Init(base, InitConfig{Rank: 4, Alpha: 8, Targets: []string{"down", "q"}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Pairs) != 2 || a.Pairs[0].Base != "blk.0.attn_q.weight" || a.Pairs[1].Base != "blk.0.ffn_down.weight" {
		t.Fatalf("pairs %v", a.Pairs)
	}
	for _, p := range a.Pairs {
		bound := 1 / math.Sqrt(float64(p.In))
		var maxAbs float64
		for _, x := range p.A {
			maxAbs = math.Max(maxAbs, math.Abs(float64(x)))
		}
		if maxAbs > bound || maxAbs < bound/4 {
			t.Errorf("%s: max |A| %v, want within (bound/4, bound=%v]", p.Base, maxAbs, bound)
		}
		for _, x := range p.B {
			if x != 0 {
				t.Fatalf("%s: B not zero without --random-b", p.Base)
			}
		}
	}
	again, _ := Init(base, InitConfig{Rank: 4, Alpha: 8, Targets: []string{"q", "down"}, Seed: 3})
	other, _ := Init(base, InitConfig{Rank: 4, Alpha: 8, Targets: []string{"q", "down"}, Seed: 4})
	if !bitsEqual(a.Pairs[0].A, again.Pairs[0].A) {
		t.Error("same seed gave a different A")
	}
	if bitsEqual(a.Pairs[0].A, other.Pairs[0].A) {
		t.Error("different seeds gave the same A")
	}
	if s := a.Scale(4); s != 2 {
		t.Errorf("scale alpha/r = %v, want 2", s)
	}
	if s := (&Adapter{Alpha: 0}).Scale(4); s != 1 {
		t.Errorf("alpha 0 scale = %v, want 1 as llama.cpp", s)
	}
}

func TestInitErrors(t *testing.T) {
	base := openT(t, fakeBase(t, "qwen2"))
	for _, cfg := range []InitConfig{
		{Rank: 0, Alpha: 1},
		{Rank: 9, Alpha: 1}, // exceeds attn_k's out dim 4... and in 8
		{Rank: 2, Alpha: float32(math.NaN())},
		{Rank: 2, Alpha: 1, Targets: []string{"bogus"}},
	} {
		if _, err := Init(base, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("Init(%+v) err = %v, want ErrConfig", cfg, err)
		}
	}
	if _, err := ParseTargets("q,,v"); !errors.Is(err, ErrConfig) {
		t.Errorf("empty target accepted: %v", err)
	}
	ts, err := ParseTargets("q, attn_v,q")
	if err != nil || len(ts) != 2 || ts[1] != "v" {
		t.Errorf("ParseTargets = %v, %v", ts, err)
	}
}

func TestValidateMismatch(t *testing.T) {
	base := openT(t, fakeBase(t, "qwen2"))
	llamaBase := openT(t, fakeBase(t, "llama"))
	a, _ := Init(base, InitConfig{Rank: 2, Alpha: 2, Seed: 1})
	if err := Validate(a, llamaBase); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "architecture") {
		t.Errorf("arch mismatch: %v", err)
	}
	c := a.Clone()
	c.Pairs[0].Base = "blk.7.attn_q.weight"
	c.Sort()
	if err := Validate(c, base); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing tensor: %v", err)
	}
	c = a.Clone()
	p := c.Pair("blk.0.attn_q.weight")
	// Same element count, wrong orientation (a transposed weight).
	p.In, p.Out = 4, 16
	p.A, p.B = make([]float32, 4*2), make([]float32, 16*2)
	if err := Validate(c, base); !errors.Is(err, ErrMismatch) {
		t.Errorf("shape mismatch: %v", err)
	}
	c = a.Clone()
	c.Pairs[2].A[1] = float32(math.Inf(-1))
	if err := Validate(c, base); !errors.Is(err, ErrInvalid) {
		t.Errorf("infinite value: %v", err)
	}
	// Validating against an adapter instead of a model.
	ap := filepath.Join(t.TempDir(), "a.gguf")
	if err := a.Write(ap, gguf.TypeF32); err != nil {
		t.Fatal(err)
	}
	if err := Validate(a, openT(t, ap)); !errors.Is(err, ErrMismatch) {
		t.Errorf("adapter as base: %v", err)
	}
	// A NaN written to disk is caught when read.
	c = a.Clone()
	c.Pairs[0].B[0] = float32(math.NaN())
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", float32(2))
	for _, p := range c.Pairs {
		w.AddTensorF32(p.NameA(), []uint64{uint64(p.In), uint64(p.Rank)}, p.A)
		w.AddTensorF32(p.NameB(), []uint64{uint64(p.Rank), uint64(p.Out)}, p.B)
	}
	np := filepath.Join(t.TempDir(), "nan.gguf")
	if err := w.WriteFile(np); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(np); !errors.Is(err, ErrInvalid) {
		t.Errorf("NaN adapter read: %v", err)
	}
}

// writeRaw writes an adapter-like GGUF with the given metadata and tensors
// (name → ne) for the malformed-file tests.
func writeRaw(t *testing.T, kv map[string]any, tensors map[string][]uint64) string {
	t.Helper()
	w := gguf.NewWriter()
	for k, v := range kv {
		w.AddKV(k, v)
	}
	for name, sh := range tensors {
		n := 1
		for _, d := range sh {
			n *= int(d)
		}
		if err := w.AddTensorF32(name, sh, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadMalformed(t *testing.T) {
	okKV := map[string]any{"general.type": "adapter", "general.architecture": "qwen2", "adapter.type": "lora", "adapter.lora.alpha": float32(1)}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range okKV {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	pair := map[string][]uint64{"blk.0.attn_q.weight.lora_a": {8, 2}, "blk.0.attn_q.weight.lora_b": {2, 8}}
	cases := []struct {
		name    string
		kv      map[string]any
		tensors map[string][]uint64
		want    error
	}{
		{"model not adapter", with("general.type", "model"), pair, ErrNotAdapter},
		{"no general.type", with("general.type", nil), pair, ErrNotAdapter},
		{"control vector", with("adapter.type", "control_vector"), pair, ErrNotAdapter},
		{"no architecture", with("general.architecture", nil), pair, ErrInvalid},
		{"foreign tensor", okKV, map[string][]uint64{"blk.0.attn_q.weight.lora_a": {8, 2}, "blk.0.attn_q.weight.lora_b": {2, 8}, "foo.weight": {8}}, ErrNotAdapter},
		{"missing half", okKV, map[string][]uint64{"blk.0.attn_q.weight.lora_a": {8, 2}}, ErrInvalid},
		{"lora_a not transposed", okKV, map[string][]uint64{"blk.0.attn_q.weight.lora_a": {2, 8}, "blk.0.attn_q.weight.lora_b": {2, 8}}, ErrInvalid},
		{"no pairs", okKV, map[string][]uint64{}, ErrInvalid},
		{"f64 alpha (llama.cpp would abort)", with("adapter.lora.alpha", float64(1)), pair, ErrInvalid},
	}
	for _, c := range cases {
		if _, err := Read(writeRaw(t, c.kv, c.tensors)); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// Not a GGUF at all, truncated, missing.
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("this is not a gguf file at all"), 0o644)
	if _, err := Read(junk); !errors.Is(err, gguf.ErrNotGGUF) {
		t.Errorf("junk: %v", err)
	}
	good := writeRaw(t, okKV, pair)
	data, _ := os.ReadFile(good)
	trunc := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(trunc, data[:len(data)-10], 0o644)
	if _, err := Read(trunc); err == nil {
		t.Error("truncated adapter accepted")
	}
	if _, err := Read(filepath.Join(dir, "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestF16Adapter(t *testing.T) {
	base := openT(t, fakeBase(t, "qwen2"))
	a, _ := Init(base, InitConfig{Rank: 2, Alpha: 2, Seed: 5, RandomB: true, Targets: []string{"v"}})
	p := filepath.Join(t.TempDir(), "a16.gguf")
	if err := a.Write(p, gguf.TypeF16); err != nil {
		t.Fatal(err)
	}
	ti, _ := openT(t, p).Tensor("blk.0.attn_v.weight.lora_a")
	if ti.Type != gguf.TypeF16 {
		t.Fatalf("type %s, want F16", ti.Type)
	}
	b, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range a.Pairs[0].A {
		if d := math.Abs(float64(x - b.Pairs[0].A[i])); d > 1e-3*math.Abs(float64(x))+1e-7 {
			t.Fatalf("A[%d] %v → %v after F16", i, x, b.Pairs[0].A[i])
		}
	}
}

func TestMerge(t *testing.T) {
	basePath := fakeBase(t, "qwen2")
	base := openT(t, basePath)
	a, _ := Init(base, InitConfig{Rank: 3, Alpha: 6, Seed: 9, RandomB: true, Targets: []string{"q", "down"}})
	out := filepath.Join(t.TempDir(), "merged.gguf")
	if err := Merge(base, a, out, gguf.TypeF32); err != nil {
		t.Fatal(err)
	}
	m := openT(t, out)
	if len(m.Tensors) != len(base.Tensors) {
		t.Fatalf("merged has %d tensors, base %d", len(m.Tensors), len(base.Tensors))
	}
	for i, k := range base.Keys() {
		if m.Keys()[i] != k {
			t.Fatalf("metadata key %d: %q, base %q", i, m.Keys()[i], k)
		}
	}
	if n, _ := m.Uint32("qwen2.block_count"); n != 1 {
		t.Errorf("block_count not copied")
	}
	for i, ti := range base.Tensors {
		if m.Tensors[i].Name != ti.Name || !equalShape(m.Tensors[i].Shape, ti.Shape...) {
			t.Fatalf("tensor %d: %s %v, base %s %v", i, m.Tensors[i].Name, m.Tensors[i].Shape, ti.Name, ti.Shape)
		}
		p := a.Pair(ti.Name)
		got, _ := m.ReadTensorRaw(ti.Name)
		want, _ := base.ReadTensorRaw(ti.Name)
		if p == nil {
			if !bytes.Equal(got, want) {
				t.Errorf("%s changed though not adapted", ti.Name)
			}
			continue
		}
		// Independent formula on ggml indices: W.ne = [in, out], element
		// (i, o) at o*in+i; A.ne = [in, r] → (i, k) at k*in+i;
		// B.ne = [r, out] → (k, o) at o*r+k.
		w0, _ := base.ReadTensorF32(ti.Name)
		w1, _ := m.ReadTensorF32(ti.Name)
		s := 6.0 / 3.0
		for o := 0; o < p.Out; o++ {
			for i := 0; i < p.In; i++ {
				var d float64
				for k := 0; k < p.Rank; k++ {
					d += float64(p.B[o*p.Rank+k]) * float64(p.A[k*p.In+i])
				}
				want := float64(w0[o*p.In+i]) + s*d
				if math.Abs(float64(w1[o*p.In+i])-want) > 1e-6 {
					t.Fatalf("%s[%d,%d] = %v, want %v", ti.Name, o, i, w1[o*p.In+i], want)
				}
			}
		}
		if bytes.Equal(got, want) {
			t.Errorf("%s unchanged by a random-B adapter", ti.Name)
		}
	}
	// F16 merge stores adapted tensors as F16 and leaves the rest alone.
	out16 := filepath.Join(t.TempDir(), "merged16.gguf")
	if err := Merge(base, a, out16, gguf.TypeF16); err != nil {
		t.Fatal(err)
	}
	m16 := openT(t, out16)
	if ti, _ := m16.Tensor("blk.0.attn_q.weight"); ti.Type != gguf.TypeF16 {
		t.Errorf("adapted tensor type %s, want F16", ti.Type)
	}
	if ti, _ := m16.Tensor("blk.0.attn_k.weight"); ti.Type != gguf.TypeF32 {
		t.Errorf("untouched tensor type %s, want F32", ti.Type)
	}
	if err := Merge(base, a, out16, gguf.TypeQ8_0); !errors.Is(err, ErrConfig) {
		t.Errorf("Q8_0 merge: %v", err)
	}
	bad := a.Clone()
	bad.Arch = "llama"
	if err := Merge(base, bad, filepath.Join(t.TempDir(), "x.gguf"), gguf.TypeF32); !errors.Is(err, ErrMismatch) {
		t.Errorf("mismatched merge: %v", err)
	}
}

func equalShape(s []uint64, want ...uint64) bool {
	if len(s) != len(want) {
		return false
	}
	for i := range s {
		if s[i] != want[i] {
			return false
		}
	}
	return true
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestMergeRefusesQuantizedBase(t *testing.T) {
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen2")
	// Q8_0: 32-element blocks of 34 bytes; W ne = [32, 2].
	if err := w.AddTensorRaw("blk.0.attn_q.weight", []uint64{32, 2}, gguf.TypeQ8_0, make([]byte, 2*34)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "q8.gguf")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	base := openT(t, p)
	a, err := Init(base, InitConfig{Rank: 1, Alpha: 1, Targets: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Merge(base, a, filepath.Join(t.TempDir(), "m.gguf"), gguf.TypeF32); !errors.Is(err, ErrUnsupported) {
		t.Errorf("merge into Q8_0: %v", err)
	}
}
