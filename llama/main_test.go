package llama

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/modelgen"
)

// testDir holds the models generated once for this test binary.
var testDir string

// tinyPath is a modelgen.DefaultConfig() model (2 layers, hidden 64, vocab 512).
var tinyPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "empo2-llama-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testDir = dir
	if os.Getenv("EMPO2_TEST_LLAMA_LOG") == "" {
		zerolog.SetGlobalLevel(zerolog.WarnLevel)
	}
	tinyPath = filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(tinyPath, modelgen.DefaultConfig()); err != nil {
		fmt.Fprintln(os.Stderr, "modelgen:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func loadTiny(t testing.TB) *Model {
	t.Helper()
	m, err := LoadModel(tinyPath, ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// newCtx creates a context for a test; Threads defaults to 1 because ggml's
// spinning thread barrier is ~1000x slower when the test machine's few
// cores are oversubscribed.
func newCtx(t testing.TB, m *Model, p ContextParams) *Context {
	t.Helper()
	if p.Threads == 0 {
		p.Threads = 1
	}
	c, err := NewContext(m, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustTokenize(t testing.TB, m *Model, text string) []int32 {
	t.Helper()
	toks, err := m.Tokenize(text, false, true)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// loraPair is one adapted weight of a test adapter.
type loraPair struct {
	base string    // base tensor, e.g. blk.0.attn_q.weight
	nIn  int       // W.ne[0]
	nOut int       // W.ne[1]
	a, b []float32 // A: ne [nIn, r]; B: ne [r, nOut]
}

// writeAdapter writes a llama.cpp LoRA adapter GGUF.
func writeAdapter(t testing.TB, path, arch string, alpha float32, r int, pairs []loraPair) {
	t.Helper()
	w := gguf.NewWriter()
	w.AddKV("general.type", "adapter")
	w.AddKV("general.architecture", arch)
	w.AddKV("adapter.type", "lora")
	w.AddKV("adapter.lora.alpha", alpha)
	for _, p := range pairs {
		if err := w.AddTensorF32(p.base+".lora_a", []uint64{uint64(p.nIn), uint64(r)}, p.a); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensorF32(p.base+".lora_b", []uint64{uint64(r), uint64(p.nOut)}, p.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// randomPairs makes LoRA pairs of rank r for the named base tensors of the
// model file, with values uniform in ±amp.
func randomPairs(t testing.TB, modelPath string, names []string, r int, amp float32, seed uint64) []loraPair {
	t.Helper()
	f, err := gguf.Open(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []loraPair
	for _, n := range names {
		ti, ok := f.Tensor(n)
		if !ok {
			t.Fatalf("no tensor %s", n)
		}
		p := loraPair{base: n, nIn: int(ti.Shape[0]), nOut: int(ti.Shape[1])}
		p.a = make([]float32, p.nIn*r)
		p.b = make([]float32, r*p.nOut)
		for i := range p.a {
			p.a[i] = (rng.Float32()*2 - 1) * amp
		}
		for i := range p.b {
			p.b[i] = (rng.Float32()*2 - 1) * amp
		}
		out = append(out, p)
	}
	return out
}

// writeMerged writes a copy of the model at src with W += s·B·A merged in
// Go for every pair (s = alpha/r · scale), reading with the gguf reader and
// writing with the gguf writer.
func writeMerged(t testing.TB, src, dst string, alpha, scale float32, r int, pairs []loraPair) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Get(k)
		w.AddKV(k, v)
	}
	byName := map[string]loraPair{}
	for _, p := range pairs {
		byName[p.base] = p
	}
	s := scale
	if alpha != 0 {
		s = scale * alpha / float32(r)
	}
	for _, ti := range f.Tensors {
		if ti.Type != gguf.TypeF32 {
			t.Fatalf("test merge handles F32 models only, %s is %s", ti.Name, ti.Type)
		}
		data, err := f.ReadTensorF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := byName[ti.Name]; ok {
			for o := 0; o < p.nOut; o++ {
				for i := 0; i < p.nIn; i++ {
					var d float32
					for k := 0; k < r; k++ {
						d += p.b[o*r+k] * p.a[k*p.nIn+i]
					}
					data[o*p.nIn+i] += s * d
				}
			}
		}
		if err := w.AddTensorF32(ti.Name, ti.Shape, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(dst); err != nil {
		t.Fatal(err)
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return 1e30
	}
	var m float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		if d < 0 {
			d = -d
		}
		if d > m {
			m = d
		}
	}
	return m
}
