package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/gpucheck"
)

// gpuCheck runs scripts/gpu-check.sh OUT as the CPU dry run (GPU_CHECK_NO_GPU:
// also on a machine with a GPU) against the test binary, with env added, and
// returns the report it wrote.
func gpuCheck(t *testing.T, env ...string) (*gpucheck.ReportDoc, string) {
	t.Helper()
	for _, tool := range []string{"bash", "timeout", "tar", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "gpu-check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(script, out)
	// the benchmark model: a 1024-token vocabulary instead of Qwen's 152k,
	// which makes the dry run several times slower
	cmd.Env = append(os.Environ(), append([]string{"EMPO2=" + binPath, "GPU_CHECK_WORK=" + t.TempDir(),
		"GPU_CHECK_THREADS=1", "GPU_CHECK_NO_GPU=1", "GPU_CHECK_TOKENIZER=none",
		"GPU_CHECK_BIG=--layers 2 --hidden 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 1024 --ctx 1024 --dtype f16"}, env...)...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh: %v\n%s", err, log)
	}
	var doc gpucheck.ReportDoc
	if err := gpucheck.ReadJSON(filepath.Join(out, gpucheck.ReportJSON), &doc); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	md, err := os.ReadFile(filepath.Join(out, gpucheck.ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "gpu-logs.tar.gz")); err != nil {
		t.Error(err)
	}
	return &doc, string(md)
}

func phaseByName(doc *gpucheck.ReportDoc) map[string]gpucheck.ReportPhase {
	m := map[string]gpucheck.ReportPhase{}
	for _, p := range doc.Phases {
		m[p.Name] = p
	}
	return m
}

// TestGPUCheckDryRun runs the whole GPU check script on the CPU: every
// phase that needs no GPU, no nvcc and no PyTorch runs and passes, the
// others are skipped with their reason, and both report files parse.
func TestGPUCheckDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole dry run: about 30 s")
	}
	doc, md := gpuCheck(t)
	ph := phaseByName(doc)
	want := map[string]int{"setup": 0, "rollouts": 8, "rollouts-attn": 3, "train": 3, "hf-export": 0, "bench": 1, "train-e2e": 1} // ok, with this many results
	for name, docs := range want {
		p, ok := ph[name]
		if !ok || p.Status != gpucheck.StatusOK || len(p.Docs) != docs {
			t.Errorf("phase %s: %+v (want ok with %d result documents)", name, p.PhaseRecord, docs)
		}
	}
	if p := ph["build"]; p.Status != gpucheck.StatusSkipped || !strings.Contains(p.Reason, "no GPU") {
		t.Errorf("build: %+v", p.PhaseRecord)
	}
	// the Python parts run only where torch, transformers and peft import
	hf := exec.Command("python3", "-c", "import torch, transformers, peft").Run() == nil
	for _, name := range []string{"hf", "hf-bench"} {
		p := ph[name]
		if hf && p.Status != gpucheck.StatusOK || !hf && (p.Status != gpucheck.StatusSkipped || !strings.Contains(p.Reason, "torch")) {
			t.Errorf("%s (PyTorch here: %v): %+v", name, hf, p.PhaseRecord)
		}
	}
	if !doc.Pass || len(doc.Phases) != 10 {
		t.Errorf("report: pass %v, %d phases", doc.Pass, len(doc.Phases))
	}
	for name, raw := range ph["rollouts"].Docs {
		var r gpucheck.RolloutResult
		if err := json.Unmarshal(raw, &r); err != nil || !r.Pass || len(r.Single) == 0 {
			t.Errorf("%s: %v %+v", name, err, r)
		}
		if strings.HasSuffix(name, "-device.json") && (r.Reference == nil || !r.Reference.Pass) {
			t.Errorf("%s: no passing comparison with the CPU reference", name)
		}
	}
	// the attention variants: each documented with its KV type and flash
	// attention setting, compared with the CPU reference
	for name, raw := range ph["rollouts-attn"].Docs {
		var r gpucheck.RolloutResult
		if err := json.Unmarshal(raw, &r); err != nil || r.Reference == nil || !strings.Contains(name, "-kv"+r.KVType+"-fa"+r.FlashAttn) {
			t.Errorf("%s: %v %+v", name, err, r)
		}
	}
	for _, row := range []string{"| rollouts | ok |", "| rollouts-attn | ok |", "| train-e2e | ok |", "| build | skipped |", "t_update=", "KV cache f16, flash attention on"} {
		if !strings.Contains(md, row) {
			t.Errorf("gpu-report.md lacks %q", row)
		}
	}
}

// TestGPUCheckTimeBudget: with too little time left the script starts no
// phase and records why, and the report is still written.
func TestGPUCheckTimeBudget(t *testing.T) {
	doc, md := gpuCheck(t, "GPU_CHECK_TIME=2", "GPU_CHECK_RESERVE=0", "GPU_CHECK_PHASES=rollouts train")
	ph := phaseByName(doc)
	for _, name := range []string{"rollouts", "train"} {
		p := ph[name]
		if p.Status != gpucheck.StatusSkipped || !strings.Contains(p.Reason, "not started: needs ~3 s") || !strings.Contains(p.Reason, "of the 2 s limit") {
			t.Errorf("%s: %+v", name, p.PhaseRecord)
		}
	}
	if _, ok := ph["bench"]; ok || len(doc.Phases) != 3 {
		t.Errorf("phases %v: want setup, rollouts, train (GPU_CHECK_PHASES)", doc.Phases)
	}
	if !strings.Contains(md, "| rollouts | skipped |") {
		t.Errorf("gpu-report.md:\n%s", md)
	}
}
