package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// file assembles a safetensors file from a raw header and data.
func file(t *testing.T, header string, data []byte) string {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteRead(t *testing.T) {
	w := NewWriter()
	w.Metadata = map[string]string{"format": "pt"}
	a := []float32{1, -2.5, 3.25, float32(math.Inf(1)), 0}
	if err := w.AddF32("b.weight", F32, []int64{5}, a); err != nil {
		t.Fatal(err)
	}
	if err := w.AddF32("a.weight", F16, []int64{1, 5}, a); err != nil {
		t.Fatal(err)
	}
	if err := w.AddF32("c", BF16, []int64{5, 1}, a); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("empty", U8, []int64{0, 3}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.AddF32("a.weight", F32, []int64{5}, a); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate name: %v", err)
	}
	if err := w.Add("bad", F32, []int64{2}, []byte{1, 2, 3}); !errors.Is(err, ErrInvalid) {
		t.Errorf("size mismatch: %v", err)
	}
	var done []int64
	w.OnTensor = func(n int64) { done = append(done, n) }
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	if len(done) != 4 || done[3] != 20+10+10 {
		t.Errorf("progress %v", done)
	}
	raw, _ := os.ReadFile(p)
	if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
		t.Errorf("data section at %d is not 8-byte aligned", 8+n)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 4 || f.Tensors[0].Name != "a.weight" {
		t.Fatalf("metadata %v tensors %v", f.Metadata, f.Tensors)
	}
	for _, name := range []string{"a.weight", "b.weight", "c"} {
		got, err := f.ReadF32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if got[i] != a[i] { // all values are exact in F16 and BF16
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], a[i])
			}
		}
	}
	if ti, _ := f.Tensor("a.weight"); ti.DType != F16 || ti.NumElements() != 5 {
		t.Errorf("a.weight: %+v", ti)
	}
	if _, err := f.ReadF32("empty"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("U8 as float32: %v", err)
	}
	if _, err := f.ReadRaw("nope"); !errors.Is(err, ErrNoTensor) {
		t.Errorf("missing tensor: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie → even
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie → even (up)
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{float32(math.Inf(-1)), 0xff80},
	} {
		if got := F32ToBF16(c.in); got != c.want {
			t.Errorf("F32ToBF16(%#x) = %#x, want %#x", math.Float32bits(c.in), got, c.want)
		}
	}
	if h := F32ToBF16(float32(math.NaN())); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("NaN → %#x", h)
	}
}

func TestCorrupt(t *testing.T) {
	eight := make([]byte, 8)
	for _, c := range []struct {
		name, header string
		data         []byte
		want         error
	}{
		{"not json", `{"a":`, nil, ErrCorrupt},
		{"array", `[1,2]   `, nil, ErrCorrupt},
		{"out of range", `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, eight, ErrCorrupt},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight, ErrCorrupt},
		{"negative", `{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, eight, ErrCorrupt},
		{"gap", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight, ErrCorrupt},
		{"overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight, ErrCorrupt},
		{"uncovered", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight, ErrCorrupt},
		{"dtype", `{"a":{"dtype":"F8_E9","shape":[8],"data_offsets":[0,8]}}`, eight, ErrUnsupported},
		{"extra field", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, eight, ErrCorrupt},
		{"metadata not strings", `{"__metadata__":{"a":1}}`, nil, ErrCorrupt},
		{"overflow", `{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, eight, ErrCorrupt},
	} {
		if _, err := Open(file(t, c.header, c.data)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// header length larger than the file, and tiny files
	p := filepath.Join(t.TempDir(), "short")
	os.WriteFile(p, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'}, 0o644)
	if _, err := Open(p); !errors.Is(err, ErrCorrupt) {
		t.Errorf("huge header length: %v", err)
	}
	os.WriteFile(p, []byte{1, 2}, 0o644)
	if _, err := Open(p); !errors.Is(err, ErrCorrupt) {
		t.Errorf("2-byte file: %v", err)
	}
	// an empty, valid file
	if f, err := Open(file(t, `{}`, nil)); err != nil || len(f.Tensors) != 0 {
		t.Errorf("empty file: %v", err)
	}
}

// FuzzOpen: no input makes Open panic or accept inconsistent offsets.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), 8)
	f.Add([]byte(`{"__metadata__":{"format":"pt"}}`), 0)
	f.Fuzz(func(t *testing.T, header []byte, n int) {
		if n < 0 || n > 1<<12 {
			return
		}
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, uint64(len(header)))
		b.Write(header)
		b.Write(make([]byte, n))
		sf, err := parse(bytes.NewReader(b.Bytes()), int64(b.Len()), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, ti := range sf.Tensors {
			if ti.Begin < 0 || ti.End > int64(n) || ti.End-ti.Begin != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted %+v in %d bytes", ti, n)
			}
		}
	})
}
