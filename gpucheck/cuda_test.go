package gpucheck

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// TestCUDABackendTrainingWithoutGPU loads the CUDA backend built by `make
// cuda` (bin/libggml-cuda.so, EMPO2_CUDA_LIB overrides; skipped when absent)
// into this process on a machine without a GPU: the training graph asked
// for device "auto" falls back to the CPU with the same log-probs and LoRA
// gradients, and device "gpu" is a typed error, not an abort. (The CLI's
// side: cmd/empo2's TestCUDABackendWithoutGPU.)
func TestCUDABackendTrainingWithoutGPU(t *testing.T) {
	lib := os.Getenv("EMPO2_CUDA_LIB")
	if lib == "" {
		lib = filepath.Join("..", "bin", "libggml-cuda.so")
	}
	lib, err := filepath.Abs(lib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("no CUDA backend library (%v): run `make cuda` (needs nvcc, not a GPU)", err)
	}
	// With a GPU the backend would register it in this test process (and
	// later tests would see it): this test is for GPU-less machines only.
	if out, err := exec.Command("nvidia-smi", "-L").Output(); err == nil && strings.Contains(string(out), "GPU") {
		t.Skipf("a GPU is present (%s): this test checks the GPU-less fallback", strings.TrimSpace(string(out)))
	}
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := modelgen.Write(model, modelgen.DefaultConfig()); err != nil {
		t.Fatal(err)
	}

	// 1. The training graph, before the backend is loaded into this process.
	batch := []cgo.Sequence{{
		Tokens:    []int32{5, 9, 14, 3, 27, 8, 11},
		Trained:   []bool{false, false, false, true, true, true, true},
		OldLogp:   []float32{0, 0, 0, -6, -6, -6, -6},
		Advantage: []float32{0, 0, 0, 1, 1, 1, 1},
	}}
	lcfg := cgo.DefaultLoRAConfig()
	lcfg.Seed = 3
	run := func(device string) (logp [][]float32, grads [][]float32, backend string) {
		m, err := cgo.Load(model, lcfg, cgo.Options{Threads: 1, Device: device})
		if err != nil {
			t.Fatalf("cgo.Load(device %q): %v", device, err)
		}
		defer m.Close()
		// B = 0 at init: give it values so that A's gradients are not zero.
		ps, err := m.ReadParams()
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range m.Params() {
			if p.IsB {
				for j := range ps[i] {
					ps[i][j] = 0.01 * float32((j%5)-2)
				}
			}
		}
		if err := m.WriteParams(ps); err != nil {
			t.Fatal(err)
		}
		if logp, err = m.LogProbsBatch([][]int32{batch[0].Tokens}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ForwardBackward(batch, cgo.DefaultObjective(), 0); err != nil {
			t.Fatal(err)
		}
		if grads, err = m.Grads(); err != nil {
			t.Fatal(err)
		}
		return logp, grads, m.Info().Backend
	}
	cpuLogp, cpuGrads, _ := run("cpu")

	// 2. Load the CUDA backend into this process: it loads, and registers
	// no GPU device here.
	if err := llama.LoadBackend(lib); err != nil {
		t.Fatalf("loading %s: %v", lib, err)
	}
	for _, d := range llama.Devices() {
		if d.Kind == "gpu" || d.Kind == "igpu" {
			t.Skipf("a GPU is present (%s, %s): this test checks the GPU-less fallback", d.Name, d.Description)
		}
	}
	autoLogp, autoGrads, backend := run("auto")
	if !strings.EqualFold(backend, "cpu") {
		t.Errorf("device auto without a GPU ran on %q, want the CPU backend", backend)
	}
	if !reflect.DeepEqual(cpuLogp, autoLogp) {
		t.Errorf("log-probs differ: cpu %v, auto %v", cpuLogp, autoLogp)
	}
	if !reflect.DeepEqual(cpuGrads, autoGrads) {
		t.Error("LoRA gradients differ between device cpu and device auto (CPU fallback)")
	}
	nonzero := false
	for _, g := range autoGrads {
		for _, x := range g {
			if x != 0 && !math.IsNaN(float64(x)) {
				nonzero = true
			}
		}
	}
	if !nonzero {
		t.Error("all gradients are zero: the comparison proves nothing")
	}
	if _, err := cgo.Load(model, lcfg, cgo.Options{Threads: 1, Device: "gpu"}); !errors.Is(err, cgo.ErrBackend) {
		t.Errorf("device gpu without a GPU: err %v, want cgo.ErrBackend", err)
	}
}
