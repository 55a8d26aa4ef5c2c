package runfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/empo2/empo2/gguf"
)

// writeModel writes a GGUF with one U8 tensor of n bytes (byte i = i mod
// 251) and returns its path and data offset.
func writeModel(t *testing.T, dir, name string, n int, arch string) (string, int64) {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", arch)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i % 251)
	}
	if err := w.AddTensorRaw("t", []uint64{uint64(n)}, gguf.TypeI8, data); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	return p, int64(g.DataOffset)
}

func flip(t *testing.T, p string, at int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// TestFingerprint: the fingerprint is the same for a copy, differs when the
// metadata, the size, the first MiB of the data, a sampled MiB or the last
// byte differ, and (as documented) not for a byte between samples.
func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	const n = 48 << 20
	p, off := writeModel(t, dir, "m.gguf", n, "qwen2")
	id, err := Fingerprint(p)
	if err != nil {
		t.Fatal(err)
	}
	if id.Size != off+n || !strings.HasPrefix(id.Fingerprint, "sha256-sampled:") || id.Path != p {
		t.Fatalf("id %+v", id)
	}
	same := func(q string) bool {
		t.Helper()
		o, err := Fingerprint(q)
		if err != nil {
			t.Fatal(err)
		}
		return o.Fingerprint == id.Fingerprint
	}
	b, _ := os.ReadFile(p)
	cp := filepath.Join(dir, "copy.gguf")
	os.WriteFile(cp, b, 0o644)
	if !same(cp) {
		t.Fatal("a copy has another fingerprint")
	}
	q, _ := writeModel(t, dir, "arch.gguf", n, "qwen3")
	if same(q) {
		t.Fatal("other metadata, same fingerprint")
	}
	q, _ = writeModel(t, dir, "size.gguf", n-32, "qwen2")
	if same(q) {
		t.Fatal("another size, same fingerprint")
	}
	data := int64(n)
	for _, at := range []int64{off + 10, off + data/2 - 5, off + data - 1} { // first MiB, the sample ending at 1/2, the last byte
		os.WriteFile(cp, b, 0o644)
		flip(t, cp, at)
		if same(cp) {
			t.Errorf("a byte at data offset %d changed, same fingerprint", at-off)
		}
	}
	os.WriteFile(cp, b, 0o644)
	flip(t, cp, off+data/32) // between the first MiB and the sample ending at 1/16
	if !same(cp) {
		t.Error("an unsampled byte changed the fingerprint: the documentation is wrong")
	}
	if _, err := Fingerprint(filepath.Join(dir, "none.gguf")); err == nil {
		t.Fatal("missing file")
	}
	os.WriteFile(cp, []byte("not a gguf"), 0o644)
	if _, err := Fingerprint(cp); err == nil {
		t.Fatal("not a GGUF")
	}
}

func TestRunMarshal(t *testing.T) {
	p := filepath.Join(t.TempDir(), RunFile)
	r := Run{Format: RunFormat, Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Model: ModelID{Path: "/m.gguf", Size: 3, Fingerprint: "x"}}
	os.WriteFile(p, r.Marshal(), 0o644)
	back, err := ReadRun(p)
	if err != nil || back != r {
		t.Fatalf("%+v %v", back, err)
	}
	os.WriteFile(p, []byte(`{"format": 7}`), 0o644)
	if _, err := ReadRun(p); err == nil || !strings.Contains(err.Error(), "format 7") {
		t.Fatalf("unknown format: %v", err)
	}
}

// TestFingerprintSplit: a split model's fingerprint covers every split: its
// size is the total, and a byte changed in the last split changes it.
func TestFingerprintSplit(t *testing.T) {
	dir := t.TempDir()
	w := gguf.NewWriter()
	w.AddKV("general.architecture", "qwen2")
	for i := range 3 {
		data := make([]byte, 1<<20)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		if err := w.AddTensorRaw(fmt.Sprintf("t%d", i), []uint64{1 << 20}, gguf.TypeI8, data); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(dir, "m.gguf")
	if err := w.WriteFile(src); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := gguf.WriteSplits(g, filepath.Join(dir, "s"), 3)
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	id, err := Fingerprint(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range paths {
		st, _ := os.Stat(p)
		total += st.Size()
	}
	if id.Size != total {
		t.Fatalf("size %d, the splits hold %d", id.Size, total)
	}
	st, _ := os.Stat(paths[2])
	flip(t, paths[2], st.Size()-1)
	if o, err := Fingerprint(paths[0]); err != nil || o.Fingerprint == id.Fingerprint {
		t.Fatalf("a byte of the last split changed, same fingerprint (%v)", err)
	}
}
