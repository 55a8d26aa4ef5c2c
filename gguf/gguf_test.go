package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// allKinds is one value of every kind the reader returns.
func allKinds() map[string]any {
	return map[string]any{
		"k.u8":    uint8(200),
		"k.i8":    int8(-100),
		"k.u16":   uint16(60000),
		"k.i16":   int16(-30000),
		"k.u32":   uint32(4000000000),
		"k.i32":   int32(-2000000000),
		"k.f32":   float32(3.25),
		"k.bool":  true,
		"k.str":   "héllo\x00world",
		"k.u64":   uint64(1) << 63,
		"k.i64":   int64(-1) << 62,
		"k.f64":   math.Pi,
		"a.u8":    []uint8{1, 2, 255},
		"a.i8":    []int8{-1, 0, 127},
		"a.u16":   []uint16{1, 65535},
		"a.i16":   []int16{-5, 5},
		"a.u32":   []uint32{7, 8, 9},
		"a.i32":   []int32{-7, 8, -9},
		"a.f32":   []float32{1.5, -2.5},
		"a.bool":  []bool{true, false, true},
		"a.str":   []string{"a", "", "ĠHello Ġworld"},
		"a.u64":   []uint64{1 << 40},
		"a.i64":   []int64{-1 << 40},
		"a.f64":   []float64{math.E, -0.0},
		"a.empty": []string{},
	}
}

func sortedKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	// deterministic but not alphabetical order, to check order is kept
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] > ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func writeSample(t *testing.T, dir string, align uint64) (string, map[string]any, []string, map[string][]float32) {
	t.Helper()
	w := NewWriter()
	w.Alignment = align
	kv := allKinds()
	keys := sortedKeys(kv)
	for _, k := range keys {
		w.AddKV(k, kv[k])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := map[string][]float32{}
	mk := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	data["f32.a"] = mk(3 * 5)
	if err := w.AddTensorF32("f32.a", []uint64{3, 5}, data["f32.a"]); err != nil {
		t.Fatal(err)
	}
	data["f16.b"] = mk(7)
	if err := w.AddTensorF16("f16.b", []uint64{7}, data["f16.b"]); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 2*34) // two Q8_0 blocks
	for i := range raw {
		raw[i] = byte(i)
	}
	if err := w.AddTensorRaw("q8.c", []uint64{32, 2}, TypeQ8_0, raw); err != nil {
		t.Fatal(err)
	}
	data["f32.d"] = mk(2 * 3 * 4)
	if err := w.AddTensorF32("f32.d", []uint64{2, 3, 4}, data["f32.d"]); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sample.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path, kv, keys, data
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint64{0, 64, 8} {
		dir := t.TempDir()
		path, kv, keys, data := writeSample(t, dir, align)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		wantAlign := align
		if align == 0 {
			wantAlign = DefaultAlignment
		}
		if f.Version != 3 || f.Alignment != wantAlign || f.DataOffset%wantAlign != 0 {
			t.Fatalf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
		}
		gotKeys := f.Keys()
		if align != 0 && align != DefaultAlignment {
			if gotKeys[len(gotKeys)-1] != KeyAlignment {
				t.Fatalf("alignment key not written: %v", gotKeys)
			}
			gotKeys = gotKeys[:len(gotKeys)-1]
		}
		if !reflect.DeepEqual(gotKeys, keys) {
			t.Fatalf("keys %v, want %v", gotKeys, keys)
		}
		for k, want := range kv {
			got, ok := f.Get(k)
			if !ok || !reflect.DeepEqual(got, want) {
				// -0.0 compares equal under DeepEqual for floats; fine
				t.Errorf("%s = %#v, want %#v", k, got, want)
			}
		}
		if s, ok := f.String("k.str"); !ok || s != "héllo\x00world" {
			t.Errorf("String: %q %v", s, ok)
		}
		if v, ok := f.Uint32("k.u32"); !ok || v != 4000000000 {
			t.Errorf("Uint32: %v %v", v, ok)
		}
		if _, ok := f.Uint32("k.i32"); ok {
			t.Errorf("Uint32 accepted a negative value")
		}
		if v, ok := f.Float32("k.f64"); !ok || v != float32(math.Pi) {
			t.Errorf("Float32: %v %v", v, ok)
		}
		if n, ok := f.ArrayLen("a.str"); !ok || n != 3 {
			t.Errorf("ArrayLen: %v %v", n, ok)
		}
		if vt, isArr, ok := f.ValueType("a.i32"); !ok || !isArr || vt != ValInt32 {
			t.Errorf("ValueType: %v %v %v", vt, isArr, ok)
		}
		if len(f.Tensors) != 4 {
			t.Fatalf("%d tensors", len(f.Tensors))
		}
		for i, ti := range f.Tensors {
			if ti.Offset%wantAlign != 0 {
				t.Errorf("tensor %s offset %d unaligned", ti.Name, ti.Offset)
			}
			if i > 0 && ti.Offset < f.Tensors[i-1].Offset+f.Tensors[i-1].Size() {
				t.Errorf("tensor %s overlaps the previous one", ti.Name)
			}
		}
		got, err := f.ReadTensorF32("f32.a")
		if err != nil || !reflect.DeepEqual(got, data["f32.a"]) {
			t.Fatalf("f32.a: %v %v", got, err)
		}
		if ti, _ := f.Tensor("f32.d"); !reflect.DeepEqual(ti.Shape, []uint64{2, 3, 4}) || ti.Type != TypeF32 {
			t.Fatalf("f32.d info %+v", ti)
		}
		got, err = f.ReadTensorF32("f16.b")
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range data["f16.b"] {
			if got[i] != F16ToF32(F32ToF16(v)) {
				t.Fatalf("f16.b[%d] = %v, want %v", i, got[i], v)
			}
		}
		raw, err := f.ReadTensorRaw("q8.c")
		if err != nil || len(raw) != 68 || raw[67] != 67 {
			t.Fatalf("q8.c raw: %d bytes, %v", len(raw), err)
		}
		if _, err := f.ReadTensorF32("q8.c"); !errors.Is(err, ErrUnsupportedType) {
			t.Fatalf("ReadTensorF32 on Q8_0: %v", err)
		}
		if _, err := f.ReadTensorF32("nope"); !errors.Is(err, ErrNoTensor) {
			t.Fatalf("missing tensor: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		if _, err := f.ReadTensorRaw("q8.c"); err == nil {
			t.Fatal("read after Close succeeded")
		}
	}
}

func TestWriteIsDeterministicAndAtomic(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	p1, _, _, _ := writeSample(t, d1, 0)
	p2, _, _, _ := writeSample(t, d2, 0)
	b1, _ := os.ReadFile(p1)
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b1, b2) {
		t.Fatal("same input, different bytes")
	}
	if len(b1)%DefaultAlignment != 0 {
		t.Fatalf("file size %d: last tensor not padded", len(b1))
	}
	// a failing write leaves the old file and no temp file behind
	w := NewWriter()
	w.AddKV("x", uint32(1))
	if err := w.AddTensorFunc("t", []uint64{4}, TypeF32, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 8)) // 8 of 16 bytes
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile(p1); err == nil {
		t.Fatal("short tensor function accepted")
	}
	b3, _ := os.ReadFile(p1)
	if !bytes.Equal(b1, b3) {
		t.Fatal("failed write changed the destination")
	}
	ents, _ := os.ReadDir(d1)
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
}

func TestWriterRejects(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensorF32("a", []uint64{2, 2}, []float32{1, 2, 3}); err == nil {
		t.Error("wrong element count accepted")
	}
	if err := w.AddTensorRaw("q", []uint64{31}, TypeQ4_0, make([]byte, 18)); err == nil {
		t.Error("ne0 not a multiple of the block size accepted")
	}
	if err := w.AddTensorRaw("u", []uint64{4}, GGMLType(4), make([]byte, 16)); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("removed type 4: %v", err)
	}
	if err := w.AddTensorF32("b", []uint64{1, 1, 1, 1, 1}, []float32{1}); err == nil {
		t.Error("5 dims accepted")
	}
	if err := w.AddTensorF32("c", []uint64{1}, []float32{1}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensorF32("c", []uint64{1}, []float32{1}); err == nil {
		t.Error("duplicate tensor accepted")
	}
	w.AddKV("bad", struct{}{})
	if err := w.WriteFile(filepath.Join(t.TempDir(), "x.gguf")); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("bad kv kind: %v", err)
	}
	// int conveniences
	w = NewWriter()
	w.AddKV("i", 5)
	w.AddKV("big", 1<<40)
	w.AddKV("arr", []int{1, -2})
	w.AddKV("i", 6) // replaces in place
	path := filepath.Join(t.TempDir(), "y.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, _ := f.Get("i"); v != int32(6) {
		t.Errorf("i = %#v", v)
	}
	if v, _ := f.Get("big"); v != int64(1<<40) {
		t.Errorf("big = %#v", v)
	}
	if v, _ := f.Get("arr"); !reflect.DeepEqual(v, []int32{1, -2}) {
		t.Errorf("arr = %#v", v)
	}
	if !reflect.DeepEqual(f.Keys(), []string{"i", "big", "arr"}) {
		t.Errorf("keys %v", f.Keys())
	}
}

// CopyMetadata: a copy of a file's metadata (keys in order, values, the
// alignment) plus the caller's tensors, written at the source's alignment.
func TestCopyMetadata(t *testing.T) {
	for _, align := range []uint64{0, 64} {
		path, _, _, _ := writeSample(t, t.TempDir(), align)
		src, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		w := NewWriter()
		w.CopyMetadata(src)
		w.AddKV("extra", "x")
		if err := w.AddTensorF32("t", []uint64{2}, []float32{1, 2}); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "copy.gguf")
		if err := w.WriteFile(out); err != nil {
			t.Fatal(err)
		}
		f, err := Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Alignment != src.Alignment || f.DataOffset%f.Alignment != 0 {
			t.Fatalf("align %d: alignment %d, source %d", align, f.Alignment, src.Alignment)
		}
		var want []string
		for _, k := range src.Keys() {
			if k != KeyAlignment {
				want = append(want, k)
			}
		}
		want = append(want, "extra")
		if align != 0 {
			want = append(want, KeyAlignment) // written from Alignment, last
		}
		if !reflect.DeepEqual(f.Keys(), want) {
			t.Fatalf("align %d: keys %v, want %v", align, f.Keys(), want)
		}
		for _, k := range src.Keys() {
			a, _ := src.Get(k)
			b, _ := f.Get(k)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("align %d: %s = %#v, source %#v", align, k, b, a)
			}
		}
	}
}

func TestTruncatedEverywhere(t *testing.T) {
	dir := t.TempDir()
	path, _, _, _ := writeSample(t, dir, 0)
	full, _ := os.ReadFile(path)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	last := f.Tensors[len(f.Tensors)-1]
	needed := int(f.DataOffset + last.Offset + last.Size())
	f.Close()
	for n := 0; n < needed; n++ {
		g, err := OpenReader(bytes.NewReader(full[:n]), int64(n))
		if err == nil {
			g.Close()
			t.Fatalf("prefix of %d/%d bytes opened without error", n, len(full))
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrNotGGUF) {
			t.Fatalf("prefix %d: error %v is neither ErrTruncated nor ErrNotGGUF", n, err)
		}
	}
}

func TestCorruptNeverPanics(t *testing.T) {
	dir := t.TempDir()
	path, _, _, _ := writeSample(t, dir, 0)
	full, _ := os.ReadFile(path)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), full...)
		for k := 0; k < 1+rng.IntN(4); k++ {
			pos := rng.IntN(int(min(len(b), 2048)))
			switch rng.IntN(3) {
			case 0:
				b[pos] = byte(rng.Uint32())
			case 1:
				b[pos] = 0xff
			case 2: // a huge little-endian length
				if pos+8 <= len(b) {
					binary.LittleEndian.PutUint64(b[pos:], rng.Uint64()>>uint(rng.IntN(64)))
				}
			}
		}
		f, err := OpenReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			continue
		}
		for _, ti := range f.Tensors {
			f.ReadTensorRaw(ti.Name)
			f.ReadTensorF32(ti.Name)
		}
		f.Close()
	}
}

func header(nTensors, nKV uint64) []byte {
	var b bytes.Buffer
	b.WriteString("GGUF")
	binary.Write(&b, binary.LittleEndian, uint32(3))
	binary.Write(&b, binary.LittleEndian, nTensors)
	binary.Write(&b, binary.LittleEndian, nKV)
	return b.Bytes()
}

func TestHostileLengths(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]byte{}
	cases["huge kv count"] = header(0, 1<<60)
	cases["huge tensor count"] = header(1<<60, 0)
	{
		b := header(0, 1)
		b = binary.LittleEndian.AppendUint64(b, 1<<62) // key length
		cases["huge key"] = append(b, "abc"...)
	}
	{
		b := header(0, 1)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 'k')
		b = binary.LittleEndian.AppendUint32(b, uint32(ValArray))
		b = binary.LittleEndian.AppendUint32(b, uint32(ValString))
		b = binary.LittleEndian.AppendUint64(b, 1<<61)
		cases["huge string array"] = b
	}
	{
		b := header(0, 1)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 'k')
		b = binary.LittleEndian.AppendUint32(b, uint32(ValArray))
		b = binary.LittleEndian.AppendUint32(b, uint32(ValArray))
		b = binary.LittleEndian.AppendUint64(b, 1)
		cases["nested array"] = append(b, make([]byte, 32)...)
	}
	{
		b := header(0, 1)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 'k')
		b = binary.LittleEndian.AppendUint32(b, 99)
		cases["bad value type"] = append(b, make([]byte, 32)...)
	}
	{
		b := header(1, 0)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 't')
		b = binary.LittleEndian.AppendUint32(b, 2)
		b = binary.LittleEndian.AppendUint64(b, 1<<40)
		b = binary.LittleEndian.AppendUint64(b, 1<<40)
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint64(b, 0)
		cases["huge tensor"] = append(b, make([]byte, 64)...)
	}
	{
		b := header(1, 0)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = append(b, 't')
		b = binary.LittleEndian.AppendUint32(b, 9) // 9 dims
		cases["too many dims"] = append(b, make([]byte, 128)...)
	}
	{
		b := header(0, 0)
		binary.LittleEndian.PutUint32(b[4:], 1)
		cases["version 1"] = b
	}
	for name, b := range cases {
		p := filepath.Join(dir, "h.gguf")
		os.WriteFile(p, b, 0o644)
		f, err := Open(p)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedType) {
			t.Errorf("%s: unexpected error kind %v", name, err)
		}
	}
}

func TestForeignFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"empty":   nil,
		"text":    []byte("hello, this is not a model\n"),
		"png":     {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13},
		"ggml":    []byte("lmgg\x01\x00\x00\x00"),
		"bigtext": []byte(strings.Repeat("GGU", 1000)),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		if _, err := Open(p); !errors.Is(err, ErrNotGGUF) {
			t.Errorf("%s: %v, want ErrNotGGUF", name, err)
		}
	}
	if _, err := Open(dir); !errors.Is(err, ErrNotGGUF) {
		t.Errorf("directory: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	w := NewWriter()
	w.AddKV("general.architecture", "qwen2")
	w.AddKV("a", []int32{1, 2, 3})
	w.AddTensorF32("t", []uint64{2, 2}, []float32{1, 2, 3, 4})
	p := filepath.Join(dir, "seed.gguf")
	if err := w.WriteFile(p); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Add(header(0, 0))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := OpenReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			g.ReadTensorF32(ti.Name)
		}
		g.Close()
	})
}

func TestOpenReaderMatchesOpen(t *testing.T) {
	path, kv, _, data := writeSample(t, t.TempDir(), 0)
	full, _ := os.ReadFile(path)
	f, err := OpenReader(bytes.NewReader(full), int64(len(full)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, _ := f.Get("a.str"); !reflect.DeepEqual(v, kv["a.str"]) {
		t.Fatalf("a.str = %#v", v)
	}
	got, err := f.ReadTensorF32("f32.d")
	if err != nil || !reflect.DeepEqual(got, data["f32.d"]) {
		t.Fatalf("f32.d: %v %v", got, err)
	}
}
