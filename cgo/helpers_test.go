package cgo

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/empo2/empo2/modelgen"
)

var (
	modelMu    sync.Mutex
	modelCache = map[string]string{}
	modelDir   string
)

// tinyModel writes (once per test binary) a generated Qwen2 GGUF.
func tinyModel(t testing.TB, cfg modelgen.Config) string {
	t.Helper()
	modelMu.Lock()
	defer modelMu.Unlock()
	key := filepath.Base(fmtCfg(cfg))
	if p, ok := modelCache[key]; ok {
		return p
	}
	if modelDir == "" {
		d, err := osMkdirTemp()
		if err != nil {
			t.Fatal(err)
		}
		modelDir = d
	}
	p := filepath.Join(modelDir, key+".gguf")
	if err := modelgen.Write(p, cfg); err != nil {
		t.Fatalf("modelgen.Write: %v", err)
	}
	modelCache[key] = p
	return p
}

func tinyCfg() modelgen.Config {
	c := modelgen.DefaultConfig() // 2 layers, hidden 64, 4 heads, 2 kv heads, ffn 128, vocab 512
	return c
}

func mustParams(t testing.TB, m *Model) [][]float32 {
	t.Helper()
	v, err := m.ReadParams()
	if err != nil {
		t.Fatalf("ReadParams: %v", err)
	}
	return v
}

func mustGrads(t testing.TB, m *Model) [][]float32 {
	t.Helper()
	v, err := m.Grads()
	if err != nil {
		t.Fatalf("Grads: %v", err)
	}
	return v
}

func mustZero(t testing.TB, m *Model) {
	t.Helper()
	if err := m.ZeroGrads(); err != nil {
		t.Fatalf("ZeroGrads: %v", err)
	}
}
