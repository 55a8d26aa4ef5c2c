package gguf_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/gguf/internal/ggmlref"
	"github.com/empo2/empo2/modelgen"
)

// sampleKVs covers every value kind, in a fixed order.
var sampleKVs = []ggmlref.KV{
	{Key: "general.architecture", Value: "qwen2"},
	{Key: "k.u8", Value: uint8(200)}, {Key: "k.i8", Value: int8(-100)}, {Key: "k.u16", Value: uint16(60000)}, {Key: "k.i16", Value: int16(-30000)},
	{Key: "k.u32", Value: uint32(4000000000)}, {Key: "k.i32", Value: int32(-2000000000)}, {Key: "k.f32", Value: float32(3.25)},
	{Key: "k.bool", Value: true}, {Key: "k.str", Value: "héllo world"}, {Key: "k.u64", Value: uint64(1) << 63}, {Key: "k.i64", Value: int64(-1) << 62},
	{Key: "k.f64", Value: math.Pi},
	{Key: "a.u8", Value: []uint8{1, 2, 255}}, {Key: "a.i8", Value: []int8{-1, 0, 127}}, {Key: "a.u16", Value: []uint16{1, 65535}},
	{Key: "a.i16", Value: []int16{-5, 5}}, {Key: "a.u32", Value: []uint32{7, 8, 9}}, {Key: "a.i32", Value: []int32{-7, 8, -9}},
	{Key: "a.f32", Value: []float32{1.5, -2.5}}, {Key: "a.bool", Value: []bool{true, false, true}},
	{Key: "a.str", Value: []string{"a", "", "ĠHello Ġworld"}}, {Key: "a.u64", Value: []uint64{1 << 40}},
	{Key: "a.i64", Value: []int64{-1 << 40}}, {Key: "a.f64", Value: []float64{math.E}}, {Key: "a.empty", Value: []int32{}},
}

func sampleTensors() []ggmlref.Tensor {
	f32 := gguf.EncodeF32([]float32{1, -2, 3.5, 4, 5, 6})
	f16 := gguf.EncodeF16([]float32{0.5, -0.25, 1e-5, 65504, 7, 8, 9})
	q8 := make([]byte, 3*34)
	for i := range q8 {
		q8[i] = byte(i * 7)
	}
	return []ggmlref.Tensor{
		{Name: "t.f32", Type: uint32(gguf.TypeF32), Shape: []uint64{3, 2}, Data: f32},
		{Name: "t.f16", Type: uint32(gguf.TypeF16), Shape: []uint64{7}, Data: f16},
		{Name: "blk.0.q8", Type: uint32(gguf.TypeQ8_0), Shape: []uint64{32, 3}, Data: q8},
		{Name: "t.3d", Type: uint32(gguf.TypeF32), Shape: []uint64{1, 2, 3}, Data: gguf.EncodeF32([]float32{1, 2, 3, 4, 5, 6})},
	}
}

func pad4(s []uint64) []uint64 {
	out := []uint64{1, 1, 1, 1}
	copy(out, s)
	return out
}

func writeGo(t *testing.T, path string, kvs []ggmlref.KV, ts []ggmlref.Tensor) {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range kvs {
		w.AddKV(kv.Key, kv.Value)
	}
	for _, tt := range ts {
		if err := w.AddTensorRaw(tt.Name, tt.Shape, gguf.GGMLType(tt.Type), tt.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// compare checks that the pure-Go reader and ggml's reader see the same file.
func compare(t *testing.T, path string) {
	t.Helper()
	ref, err := ggmlref.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != ref.Version || f.Alignment != ref.Alignment || f.DataOffset != ref.DataOffset {
		t.Fatalf("go: v%d align %d data %d; ggml: v%d align %d data %d",
			f.Version, f.Alignment, f.DataOffset, ref.Version, ref.Alignment, ref.DataOffset)
	}
	keys := f.Keys()
	if len(keys) != len(ref.KVs) {
		t.Fatalf("go sees %d keys, ggml %d", len(keys), len(ref.KVs))
	}
	for i, kv := range ref.KVs {
		v, _ := f.Get(keys[i])
		if keys[i] != kv.Key || !reflect.DeepEqual(v, kv.Value) {
			t.Fatalf("key %d: go %s=%#v, ggml %s=%#v", i, keys[i], v, kv.Key, kv.Value)
		}
	}
	if len(f.Tensors) != len(ref.Tensors) {
		t.Fatalf("go sees %d tensors, ggml %d", len(f.Tensors), len(ref.Tensors))
	}
	for i, rt := range ref.Tensors {
		gt := f.Tensors[i]
		if gt.Name != rt.Name || uint32(gt.Type) != rt.Type || gt.Offset != rt.Offset || !reflect.DeepEqual(pad4(gt.Shape), rt.Shape) {
			t.Fatalf("tensor %d: go %+v, ggml %s type %d off %d shape %v", i, gt, rt.Name, rt.Type, rt.Offset, rt.Shape)
		}
		data, err := f.ReadTensorRaw(gt.Name)
		if err != nil || !bytes.Equal(data, rt.Data) {
			t.Fatalf("tensor %s data differs (%v)", gt.Name, err)
		}
	}
}

func TestGoWrittenReadByGGML(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "go.gguf")
	writeGo(t, p, sampleKVs, sampleTensors())
	compare(t, p)

	// non-default alignment
	kvs := append([]ggmlref.KV{{Key: "general.alignment", Value: uint32(64)}}, sampleKVs...)
	p64 := filepath.Join(dir, "go64.gguf")
	writeGo(t, p64, kvs, sampleTensors())
	compare(t, p64)
}

func TestGGMLWrittenReadByGo(t *testing.T) {
	dir := t.TempDir()
	pg := filepath.Join(dir, "ggml.gguf")
	if err := ggmlref.Write(pg, sampleKVs, sampleTensors()); err != nil {
		t.Fatal(err)
	}
	compare(t, pg)
	// and both writers produce the very same bytes
	pw := filepath.Join(dir, "go.gguf")
	writeGo(t, pw, sampleKVs, sampleTensors())
	a, _ := os.ReadFile(pg)
	b, _ := os.ReadFile(pw)
	if !bytes.Equal(a, b) {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		t.Fatalf("ggml wrote %d bytes, Go %d; first difference at byte %d", len(a), len(b), n)
	}
}

func TestGeneratedModelsReadByGGML(t *testing.T) {
	dir := t.TempDir()
	for _, dt := range []string{"f32", "f16"} {
		cfg := modelgen.DefaultConfig()
		cfg.DType = dt
		cfg.TiedEmbeddings = dt == "f16"
		p := filepath.Join(dir, dt+".gguf")
		if err := modelgen.Write(p, cfg); err != nil {
			t.Fatal(err)
		}
		compare(t, p)
	}
}

func TestGGMLRejectsWhatGoRejects(t *testing.T) {
	// a truncated file: both refuse it
	dir := t.TempDir()
	p := filepath.Join(dir, "go.gguf")
	writeGo(t, p, sampleKVs, sampleTensors())
	full, _ := os.ReadFile(p)
	for _, n := range []int{3, 24, 100, len(full) / 2, len(full) - 40} {
		c := filepath.Join(dir, "cut.gguf")
		os.WriteFile(c, full[:n], 0o644)
		if _, err := gguf.Open(c); err == nil {
			t.Errorf("go opened a %d-byte prefix", n)
		}
		if _, err := ggmlref.Read(c); err == nil {
			t.Errorf("ggml opened a %d-byte prefix", n)
		}
	}
}
