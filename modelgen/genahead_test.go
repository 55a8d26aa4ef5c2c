package modelgen

import (
	"bytes"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/empo2/empo2/gguf"
)

// TestParallelGenerationSameBytes: tensors generated ahead in parallel
// (addGenTensors) hold exactly the bytes of generating each one alone.
func TestParallelGenerationSameBytes(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(prev)
	cfg := DefaultConfig()
	cfg.DType = "f16"
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(path, cfg); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ts := range cfg.tensors() {
		data, err := f.ReadTensorRaw(ts.name)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := f.Tensor(ts.name)
		var want bytes.Buffer
		if err := genTensor(&want, ts, cfg.Seed, info.Type == gguf.TypeF16); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want.Bytes()) {
			t.Fatalf("tensor %s: bytes differ from its sequential generation", ts.name)
		}
	}
}
