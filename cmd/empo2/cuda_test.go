package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
// machine without a GPU and checks the graceful path of the CLI: the
// library loads, it reports no device, and `empo2 generate` gives the same
// greedy tokens and log-probs with it as without it (the training graph's
// fallback: gpucheck's TestCUDABackendTrainingWithoutGPU).
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
	// the training graph with the backend loaded: gpucheck's TestCUDABackendTrainingWithoutGPU
}
