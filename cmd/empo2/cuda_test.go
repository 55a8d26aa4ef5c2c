package main

import (
	"encoding/json"
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

// cudaLibrary returns bin/libggml-cuda.so built by `make cuda`
// (EMPO2_CUDA_LIB overrides), or skips the test when it is absent.
func cudaLibrary(t *testing.T) string {
	t.Helper()
	lib := os.Getenv("EMPO2_CUDA_LIB")
	if lib == "" {
		lib = filepath.Join("..", "..", "bin", "libggml-cuda.so")
	}
	lib, err := filepath.Abs(lib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("no CUDA backend library (%v): run `make cuda` (needs nvcc, not a GPU)", err)
	}
	return lib
}

// TestCUDABackendWithoutGPU loads the CUDA backend built by `make cuda` on a
// machine without a GPU and checks the graceful path: the library loads, it
// reports no device, `empo2 generate` gives the same greedy tokens and
// log-probs with it as without it, and the training graph asked for device
// "auto" falls back to the CPU with the same log-probs and LoRA gradients
// (and device "gpu" is a typed error, not an abort).
func TestCUDABackendWithoutGPU(t *testing.T) {
	lib := cudaLibrary(t)
	// With a GPU the backend would register it in this test process (and
	// later tests would see it): this test is for GPU-less machines only.
	if out, err := exec.Command("nvidia-smi", "-L").Output(); err == nil && strings.Contains(string(out), "GPU") {
		t.Skipf("a GPU is present (%s): this test checks the GPU-less fallback", strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(model, modelgen.DefaultConfig()); err != nil {
		t.Fatal(err)
	}

	// 1. The CLI: same greedy generation with and without the backend.
	gen := func(extra ...string) (stdout, stderr string) {
		args := append(extra, "generate", "--model", model, "--prompt", "go to the kitchen", "--max-tokens", "12",
			"--temperature", "0", "--threads", "1", "--json")
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("empo2 %v: %v\n%s", args, err, errOut)
		}
		return out, errOut
	}
	type genOut struct {
		Sequences []struct {
			Tokens   []int32   `json:"tokens"`
			LogProbs []float32 `json:"logprobs"`
		} `json:"sequences"`
	}
	parse := func(s string) genOut {
		var g genOut
		if err := json.Unmarshal([]byte(s), &g); err != nil || len(g.Sequences) != 1 || len(g.Sequences[0].Tokens) == 0 {
			t.Fatalf("generate JSON (%v): %s", err, s)
		}
		return g
	}
	plainOut, _ := gen()
	cudaOut, cudaErr := gen("--backend", lib, "--log-level", "debug")
	if !strings.Contains(cudaErr, "loaded ggml backend") {
		t.Errorf("no 'loaded ggml backend' log line with --backend %s:\n%s", lib, cudaErr)
	}
	if p, c := parse(plainOut), parse(cudaOut); !reflect.DeepEqual(p, c) {
		t.Errorf("generation differs with the CUDA backend loaded:\nwithout %+v\nwith    %+v", p, c)
	}

	// 2. The training graph, before the backend is loaded into this process.
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

	// 3. Load the CUDA backend into this process: it loads, and registers
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
