package gguf_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/gguf/internal/ggmlref"
	"github.com/empo2/empo2/modelgen"
)

// splitModel writes the default generated model into dir and, with
// WriteSplits, as 3 splits named prefix-0000i-of-00003.gguf; it returns the
// open unsplit model (closed when the test ends) and the split paths.
func splitModel(t *testing.T, dir, prefix string) (*gguf.File, []string) {
	t.Helper()
	src := filepath.Join(dir, "m.gguf")
	if err := modelgen.Write(src, modelgen.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	orig, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orig.Close() })
	paths, err := gguf.WriteSplits(orig, filepath.Join(dir, prefix), 3)
	if err != nil {
		t.Fatal(err)
	}
	return orig, paths
}

// TestSplitRoundTrip: a generated model written as 3 splits (WriteSplits)
// is, opened by its first file, the same model: the same metadata keys in
// the same order and values (no split.* key), the same tensors in the same
// order with the same bytes. Each split file, read by ggml's own GGUF
// reader, has gguf-split's keys with llama.cpp's types (split.no u16 from
// 0, split.count u16, split.tensors.count i32), the metadata only in the
// first, and a run of the tensors; the names follow llama_split_path.
func TestSplitRoundTrip(t *testing.T) {
	dir := t.TempDir()
	orig, paths := splitModel(t, dir, "split")
	want := []string{"split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"}
	var total int64
	seen := 0
	for i, p := range paths {
		if filepath.Base(p) != want[i] {
			t.Fatalf("split %d named %s, want %s", i, filepath.Base(p), want[i])
		}
		ref, err := ggmlref.Read(p)
		if err != nil {
			t.Fatalf("ggml rejects split %d: %v", i, err)
		}
		kv := map[string]any{}
		for _, x := range ref.KVs {
			kv[x.Key] = x.Value
		}
		if kv[gguf.KeySplitNo] != uint16(i) || kv[gguf.KeySplitCount] != uint16(3) || kv[gguf.KeySplitTensorsCount] != int32(len(orig.Tensors)) {
			t.Fatalf("split %d keys: %v %v %v", i, kv[gguf.KeySplitNo], kv[gguf.KeySplitCount], kv[gguf.KeySplitTensorsCount])
		}
		if _, hasArch := kv["general.architecture"]; hasArch != (i == 0) || (i > 0 && len(ref.KVs) != 3) {
			t.Fatalf("split %d: %d keys, architecture present %v", i, len(ref.KVs), hasArch)
		}
		if len(ref.Tensors) == 0 {
			t.Fatalf("split %d holds no tensor", i)
		}
		for _, rt := range ref.Tensors {
			if rt.Name != orig.Tensors[seen].Name {
				t.Fatalf("split %d: tensor %s, want %s", i, rt.Name, orig.Tensors[seen].Name)
			}
			seen++
		}
		st, _ := os.Stat(p)
		total += st.Size()
	}
	if seen != len(orig.Tensors) {
		t.Fatalf("%d tensors in the splits, %d in the model", seen, len(orig.Tensors))
	}

	f, err := gguf.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !reflect.DeepEqual(f.Splits, paths) || f.Size != total {
		t.Fatalf("Splits %v size %d, want %v and %d", f.Splits, f.Size, paths, total)
	}
	if !reflect.DeepEqual(f.Keys(), orig.Keys()) {
		t.Fatalf("keys differ:\n%v\n%v", f.Keys(), orig.Keys())
	}
	for _, k := range orig.Keys() {
		a, _ := f.Get(k)
		b, _ := orig.Get(k)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("key %s: %v vs %v", k, a, b)
		}
	}
	if len(f.Tensors) != len(orig.Tensors) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(orig.Tensors))
	}
	for i, ti := range orig.Tensors {
		g := f.Tensors[i]
		if g.Name != ti.Name || g.Type != ti.Type || !reflect.DeepEqual(g.Shape, ti.Shape) {
			t.Fatalf("tensor %d: %+v vs %+v", i, g, ti)
		}
		a, err := f.ReadTensorRaw(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := orig.ReadTensorRaw(ti.Name)
		if !bytes.Equal(a, b) {
			t.Fatalf("tensor %s: bytes differ", ti.Name)
		}
	}
	// a writer copying the merged view writes one unsplit model
	out := filepath.Join(dir, "merged.gguf")
	w := gguf.NewWriter()
	w.CopyMetadata(f)
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.Get(gguf.KeySplitCount); ok || m.Splits != nil {
		t.Fatal("copied metadata of a split model still says split")
	}
}

// TestSplitErrors: opening a later split, a missing or renamed split, an
// inconsistent count, or one split through OpenReader is ErrSplit.
func TestSplitErrors(t *testing.T) {
	dir := t.TempDir()
	orig, paths := splitModel(t, dir, "s")
	expectSplitErr := func(what, path string) {
		t.Helper()
		f, err := gguf.Open(path)
		if !errors.Is(err, gguf.ErrSplit) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("%s: got %v, want ErrSplit", what, err)
		}
	}
	expectSplitErr("second split", paths[1])
	renamed := filepath.Join(dir, "first.gguf")
	data, _ := os.ReadFile(paths[0])
	if err := os.WriteFile(renamed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	expectSplitErr("misnamed first split", renamed)
	if _, err := gguf.OpenReader(bytes.NewReader(data), int64(len(data))); !errors.Is(err, gguf.ErrSplit) {
		t.Fatalf("OpenReader of a split: got %v", err)
	}
	// the third split replaced by the second (wrong split.no)
	third, _ := os.ReadFile(paths[2])
	second, _ := os.ReadFile(paths[1])
	if err := os.WriteFile(paths[2], second, 0o644); err != nil {
		t.Fatal(err)
	}
	expectSplitErr("wrong split.no", paths[0])
	if err := os.Remove(paths[2]); err != nil {
		t.Fatal(err)
	}
	expectSplitErr("missing split", paths[0])
	if err := os.WriteFile(paths[2], third, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := gguf.Open(paths[0]); err != nil {
		t.Fatalf("restored: %v", err)
	} else {
		f.Close()
	}
	if _, err := gguf.WriteSplits(orig, filepath.Join(dir, "x"), len(orig.Tensors)+1); !errors.Is(err, gguf.ErrSplit) {
		t.Fatalf("more splits than tensors: %v", err)
	}
}
