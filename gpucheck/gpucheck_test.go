package gpucheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/safetensors"
)

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.WarnLevel) // llama.cpp's load chatter
	os.Exit(m.Run())
}

func tinyModel(t *testing.T, dtype string) string {
	t.Helper()
	cfg := modelgen.DefaultConfig()
	cfg.DType = dtype
	p := filepath.Join(t.TempDir(), "tiny-"+dtype+".gguf")
	if err := modelgen.Write(p, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// schedLine formats a node line exactly as ggml_backend_sched_print_assignments
// does (its printf format, reproduced independently of the parser).
func schedLine(i int, op, name, size, backend, cause string) string {
	return fmt.Sprintf("node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s] use=%d:", i, op, name, size, backend, cause, 1) +
		fmt.Sprintf(" %20.20s (%5.5s) [%5.5s %8.8s]", "src", "4K", backend, "")
}

func TestParseSchedDump(t *testing.T) {
	lines := []string{
		"some other log line",
		// an earlier graph: replaced by the last one
		"## SPLIT #0: CPU # 0 inputs",
		schedLine(0, "MUL_MAT", "old", "1K", "CPU", ""),
		// the last graph: device, CPU fallback, device
		"## SPLIT #0: CUDA0 # 2 inputs: [a (  4K)] [b (  4K)] ",
		schedLine(0, "GET_ROWS", "inp_embd", "16K", "CUDA0", "usr#0"),
		schedLine(1, "MUL_MAT", "Qcur-0 (reshaped) (permuted)", "16K", "CUDA0", ""),
		"## SPLIT #1: CPU # 1 inputs: [c (  16K)] ",
		schedLine(2, "RMS_NORM_BACK", "node_7", "16K", "CPU", "usr#3"),
		schedLine(3, "RMS_NORM_BACK", "node_8", "16K", "CPU", ""),
		schedLine(4, "OUT_PROD", "node_9", "16K", "CPU", ""),
		"## SPLIT #2: CUDA0 # 1 inputs: [d (  16K)] ",
		schedLine(1234, "ADD", "node_1234 with a very long name", "1M", "CUDA0", ""),
		"node #  5 (broken",
	}
	rep := parseSchedDump(lines, "CUDA0")
	if rep.Dumps != 2 || rep.NSplits != 3 {
		t.Fatalf("dumps %d splits %d, want 2 and 3: %+v", rep.Dumps, rep.NSplits, rep)
	}
	wantSplits := []SchedSplit{{"CUDA0", 2, 2}, {"CPU", 1, 3}, {"CUDA0", 1, 1}}
	for i, s := range wantSplits {
		if rep.Splits[i] != s {
			t.Errorf("split %d: %+v, want %+v", i, rep.Splits[i], s)
		}
	}
	if rep.NodesByBackend["CUDA0"] != 3 || rep.NodesByBackend["CPU"] != 3 {
		t.Errorf("nodes by backend %v", rep.NodesByBackend)
	}
	// ggml prints the op in 10 characters: RMS_NORM_BACK is cut
	want := []OpCount{{"RMS_NORM_B", 2}, {"OUT_PROD", 1}}
	if len(rep.CPUOps) != 2 || rep.CPUOps[0] != want[0] || rep.CPUOps[1] != want[1] {
		t.Errorf("CPU ops %v, want %v", rep.CPUOps, want)
	}
	if rep.Unparsed != 1 {
		t.Errorf("unparsed %d, want 1 (the broken line)", rep.Unparsed)
	}
	// the CPU as the primary backend: nothing fell back
	if r := parseSchedDump(lines, "CPU"); len(r.CPUOps) != 0 {
		t.Errorf("CPU primary: CPU ops %v, want none", r.CPUOps)
	}
}

// TestSchedCaptureReal reads ggml's own dump of the training graph on the
// CPU: one split holding every node; and nothing without the environment
// variable.
func TestSchedCaptureReal(t *testing.T) {
	model := tinyModel(t, "f32")
	lcfg := cgo.LoRAConfig{Rank: 2, Alpha: 4, Seed: 1, RandomB: true}
	run := func(debug bool) SchedReport {
		var restore func()
		if debug {
			restore = schedDebug()
		}
		m, err := cgo.Load(model, lcfg, cgo.Options{Threads: 1})
		if restore != nil {
			restore()
		}
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		seq := cgo.Sequence{Tokens: []int32{3, 9, 27, 81, 243}, Trained: []bool{false, false, true, true, true},
			OldLogp: []float32{0, 0, -6, -6, -6}, Advantage: []float32{0, 0, 1, 1, 1}}
		lines, err := captureLog(func() error {
			_, err := m.ForwardBackward([]cgo.Sequence{seq}, cgo.DefaultObjective(), 0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return parseSchedDump(lines, m.Info().Backend)
	}
	rep := run(true)
	if rep.Dumps < 1 || rep.NSplits != 1 || rep.Unparsed != 0 {
		t.Fatalf("real dump: %+v", rep)
	}
	if n := rep.NodesByBackend["CPU"]; n < 50 || n != rep.Splits[0].Nodes {
		t.Errorf("training graph nodes on the CPU: %d (split %+v)", n, rep.Splits[0])
	}
	if len(rep.CPUOps) != 0 {
		t.Errorf("CPU ops %v with the CPU as the primary backend", rep.CPUOps)
	}
	if os.Getenv(schedDebugEnv) != "" {
		t.Errorf("%s left set", schedDebugEnv)
	}
	if rep := run(false); rep.Dumps != 0 {
		t.Errorf("a dump without %s: %+v", schedDebugEnv, rep)
	}
}

func TestCompareSeqs(t *testing.T) {
	ref := []GenSeq{{0, []int32{1, 2, 3, 4}, []float32{-1, -2, -3, -4}}}
	margin := func(m float64) func(int, []int32, int32, int32) float64 {
		return func(int, []int32, int32, int32) float64 { return m }
	}
	cases := []struct {
		name string
		got  GenSeq
		m    float64
		pass bool
		tie  int
		diff float64
	}{
		{"equal", GenSeq{0, []int32{1, 2, 3, 4}, []float32{-1, -2, -3, -4}}, 1, true, -1, 0},
		{"within tol", GenSeq{0, []int32{1, 2, 3, 4}, []float32{-1, -2.0005, -3, -4}}, 1, true, -1, 0.0005},
		{"beyond tol", GenSeq{0, []int32{1, 2, 3, 4}, []float32{-1, -2.01, -3, -4}}, 1, false, -1, 0.01},
		{"near tie", GenSeq{0, []int32{1, 2, 7, 8}, []float32{-1, -2, -2.9995, -1}}, 1e-4, true, 1, 0},
		{"flip", GenSeq{0, []int32{1, 2, 7, 8}, []float32{-1, -2, -1, -1}}, 0.5, false, 0, 0},
		{"shorter", GenSeq{0, []int32{1, 2, 3}, []float32{-1, -2, -3}}, 1, false, -1, 0},
		{"NaN", GenSeq{0, []int32{1, 2, 3, 4}, []float32{-1, float32(math.NaN()), -3, -4}}, 1, false, -1, math.Inf(1)},
	}
	for _, c := range cases {
		a := compareSeqs(ref, []GenSeq{c.got}, false, 1e-3, "test", margin(c.m))
		if a.Pass != c.pass {
			t.Errorf("%s: pass %v, want %v (%+v)", c.name, a.Pass, c.pass, a)
		}
		if math.Abs(float64(a.MaxAbsLogp)-c.diff) > 1e-6 && !(math.IsInf(c.diff, 1) && math.IsInf(float64(a.MaxAbsLogp), 1)) {
			t.Errorf("%s: max |Δ| %v, want %v", c.name, a.MaxAbsLogp, c.diff)
		}
		if c.tie >= 0 {
			if len(a.Mismatches) != 1 || a.Mismatches[0].Tie != (c.tie == 1) || a.Mismatches[0].Pos != 2 {
				t.Errorf("%s: mismatches %+v", c.name, a.Mismatches)
			}
		}
	}
}

func TestRelDiff(t *testing.T) {
	if r, n := relDiff([]float32{3, 4}, []float32{3, 4.5}); math.Abs(r-0.1) > 1e-9 || n != 5 {
		t.Errorf("rel %v norm %v, want 0.1 and 5", r, n)
	}
	if r, _ := relDiff([]float32{0, 0}, []float32{0, 0.25}); r != 0.25 {
		t.Errorf("zero reference: %v, want the absolute 0.25", r)
	}
	for _, got := range [][]float32{{1, float32(math.NaN())}, {1, float32(math.Inf(1))}, {1}} {
		if r, _ := relDiff([]float32{1, 2}, got); !math.IsInf(r, 1) {
			t.Errorf("relDiff(%v) = %v, want +Inf", got, r)
		}
	}
	b, err := json.Marshal(struct{ X, Y, Z jsonFloat }{jsonFloat(math.Inf(1)), jsonFloat(math.NaN()), 0.5})
	if err != nil || string(b) != `{"X":"+Inf","Y":"NaN","Z":0.5}` {
		t.Errorf("jsonFloat: %s %v", b, err)
	}
	var back struct{ X, Y, Z jsonFloat }
	if err := json.Unmarshal(b, &back); err != nil || !math.IsInf(float64(back.X), 1) || !math.IsNaN(float64(back.Y)) || back.Z != 0.5 {
		t.Errorf("jsonFloat round trip: %+v %v", back, err)
	}
}

// TestRollouts: a second run agrees with the first exactly; a reference with
// one log-prob moved by 0.01, or one token changed, fails.
func TestRollouts(t *testing.T) {
	ctx := context.Background()
	f32, f16 := tinyModel(t, "f32"), tinyModel(t, "f16")
	ref, err := Rollouts(ctx, RolloutConfig{Model: f32, Threads: 1, MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Single) != len(DefaultPrompts) || len(ref.Single[0].Tokens) != 12 || !ref.Pass {
		t.Fatalf("reference run: %+v", ref)
	}
	dev, err := Rollouts(ctx, RolloutConfig{Model: f32, GPULayers: -1, Threads: 1, MaxTokens: 12, Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	if a := dev.Reference; a == nil || !a.Pass || a.MaxAbsLogp != 0 || a.Tokens != 2*len(DefaultPrompts)*12 {
		t.Fatalf("same run against itself: %+v", a)
	}

	moved := cloneRollout(ref)
	moved.Single[1].LogProbs[5] += 0.01
	r, err := Rollouts(ctx, RolloutConfig{Model: f32, Threads: 1, MaxTokens: 12, Reference: moved})
	if !errors.Is(err, ErrMismatch) || r == nil || r.Pass || math.Abs(float64(r.Reference.MaxAbsLogp)-0.01) > 1e-5 {
		t.Fatalf("moved log-prob: err %v, result %+v", err, r)
	}
	flipped := cloneRollout(ref)
	s := &flipped.Batched[2]
	s.Tokens[4] = (s.Tokens[4] + 1) % 512
	r, err = Rollouts(ctx, RolloutConfig{Model: f32, Threads: 1, MaxTokens: 12, Reference: flipped})
	if !errors.Is(err, ErrMismatch) || r == nil || len(r.Reference.Mismatches) != 1 {
		t.Fatalf("changed token: err %v, result %+v", err, r)
	}
	if m := r.Reference.Mismatches[0]; !m.Batched || m.Pos != 4 || m.Tie || !(m.Margin > 1e-3) {
		t.Errorf("changed token: mismatch %+v (a greedy token beats another by more than the tolerance)", m)
	}

	// F16: the noise floor against the F32 twin is positive and becomes the
	// tolerance of a run against it
	r16, err := Rollouts(ctx, RolloutConfig{Model: f16, Threads: 1, MaxTokens: 12, NoiseModel: f32})
	if err != nil {
		t.Fatal(err)
	}
	if r16.NoiseFloor == nil || !(*r16.NoiseFloor > 1e-5 && *r16.NoiseFloor < 0.1) {
		t.Fatalf("noise floor %v", r16.NoiseFloor)
	}
	d16, err := Rollouts(ctx, RolloutConfig{Model: f16, Threads: 1, MaxTokens: 12, Reference: r16})
	if err != nil || d16.Reference.Tol != *r16.NoiseFloor {
		t.Fatalf("F16 against its reference: %v, tol %v", err, d16.Reference)
	}
}

func cloneRollout(r *RolloutResult) *RolloutResult {
	b, _ := json.Marshal(r)
	var c RolloutResult
	_ = json.Unmarshal(b, &c)
	return &c
}

// TestTrain: the CPU engines agree exactly with the reference; the batch
// exercises every branch of the objective; the dump names PEFT's modules
// with PEFT's shapes (checked against `lora.ExportPEFT` of the dumped
// adapter, read back as safetensors) and holds the reference gradients.
func TestTrain(t *testing.T) {
	model := tinyModel(t, "f32")
	dump := t.TempDir()
	res, err := Train(TrainConfig{Model: model, Device: "auto", Threads: 1, Shared: true, Seed: 4, Dump: dump})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Variants) != 2 || !res.Pass {
		t.Fatalf("result %+v", res)
	}
	st := res.ReferenceStats
	if st.ClipFrac == 0 || st.DualClipFrac == 0 || st.Sequences != res.Sequences-1 || st.Tokens == 0 || st.Tokens != res.TrainedTokens {
		t.Errorf("the batch does not reach every branch: %+v", st)
	}
	for _, v := range res.Variants {
		if v.LogpMaxAbs != 0 || v.GradWorstRel != 0 || len(v.Grads) == 0 || v.Sched.NSplits != 1 || v.Memory.Splits != 1 {
			t.Errorf("%s: %+v", v.Name, v)
		}
	}

	var d HFDump
	if err := ReadJSON(filepath.Join(dump, "hf-check.json"), &d); err != nil {
		t.Fatal(err)
	}
	a, err := lora.Read(filepath.Join(dump, "adapter.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	peft := t.TempDir()
	if err := lora.ExportPEFT(a, base, peft, lora.PEFTOptions{}); err != nil {
		t.Fatal(err)
	}
	sf, err := safetensors.Open(filepath.Join(peft, lora.PEFTWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	shapes := map[string][]int64{}
	for _, tn := range sf.Tensors {
		shapes[tn.Name] = tn.Shape
	}
	if len(d.Reference.Grads) != len(shapes) || len(d.Batch) != 4 || d.Alpha != 16 || d.Rank != 8 {
		t.Fatalf("dump: %d grads for %d PEFT tensors, %d sequences, alpha %v rank %d", len(d.Reference.Grads), len(shapes), len(d.Batch), d.Alpha, d.Rank)
	}
	for _, g := range d.Reference.Grads {
		name := "base_model.model." + g.Module + ".lora_" + g.Part + ".weight"
		s, ok := shapes[name]
		if !ok || len(s) != 2 || s[0] != int64(g.Shape[0]) || s[1] != int64(g.Shape[1]) || len(g.Data) != g.Shape[0]*g.Shape[1] {
			t.Errorf("%s: dump shape %v (%d values), PEFT file %v", name, g.Shape, len(g.Data), s)
		}
	}
	if !strings.HasPrefix(d.Reference.Grads[0].Module, "model.layers.0.self_attn.q_proj") {
		t.Errorf("first module %q", d.Reference.Grads[0].Module)
	}
}

func TestBench(t *testing.T) {
	model := tinyModel(t, "f16")
	var partial int
	res, err := Bench(context.Background(), BenchConfig{Model: model, Threads: 1, Batches: []int{1, 3}, GenTokens: 5, PromptTokens: 7,
		TrainSeqs: 5, TrainLen: 20, MicroTokens: 40, Steps: 2}, func(*BenchResult) { partial++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rollouts) != 2 || res.Rollouts[1].Tokens != 15 || len(res.Steps) != 2 || res.MicroBatches != 3 || partial < 5 {
		t.Fatalf("result %+v (%d partial reports)", res, partial)
	}
	// 5 sequences in graphs of 2: the three micro-batches cover every trained token
	if res.Stats.Tokens != 5*19 || !(res.Steps[1].GradNorm > 0) {
		t.Errorf("last step: stats %+v, grad norm %v", res.Stats, res.Steps[1].GradNorm)
	}
	if _, err := Bench(context.Background(), BenchConfig{Model: model, Batches: []int{0}}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("batch 0: %v", err)
	}
}

// TestWriteReport renders a work folder with every kind of phase record.
func TestWriteReport(t *testing.T) {
	work, out := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(work, "phases"), 0o755))
	must(os.MkdirAll(filepath.Join(work, "logs"), 0o755))
	must(os.MkdirAll(filepath.Join(work, "run"), 0o755))
	must(os.WriteFile(filepath.Join(work, "meta.json"), []byte(`{"gpu": "NVIDIA H100 80GB HBM3, 9.0, 580.159.04, 81559 MiB", "cores": 16}`), 0o644))
	must(WriteJSON(filepath.Join(work, "bench.json"), &BenchResult{Kind: KindBench, Model: "big.gguf",
		Rollouts: []RolloutBench{{Batch: 8, Tokens: 512, Seconds: 2, TokPerSec: 256}}, Steps: []StepBench{{Seconds: 1.5, TokPerSec: 5461}}}))
	must(os.WriteFile(filepath.Join(work, "hf-bench.json"), []byte(`{"kind": "hf-bench", "ratio": {"hf_over_empo2_time": 1.7}}`), 0o644))
	must(os.WriteFile(filepath.Join(work, "run", "metrics.jsonl"), []byte(`{"step":1,"t_rollout":3.5,"t_update":1.25,"loss":0}`+"\n"), 0o644))
	must(os.WriteFile(filepath.Join(work, "logs", "train.log"), []byte("line 1\nempo2: cgo: ggml backend failure: boom\n"), 0o644))
	recs := []PhaseRecord{
		{Name: "setup", Status: StatusOK, Seconds: 1},
		{Name: "bench", Status: StatusOK, Seconds: 80, Need: 90, Budget: 180, Results: []string{"bench.json", "gpumem-bench.json"}},
		{Name: "hf-bench", Status: StatusSkipped, Need: 60, Budget: 150, Reason: "not started: needs ~60 s, 12 s left", Results: []string{"hf-bench.json"}},
		{Name: "train", Status: StatusFailed, Seconds: 3, Reason: "exit 1", Log: "logs/train.log"},
		{Name: "train-e2e", Status: StatusOK, Results: []string{"run/metrics.jsonl"}},
	}
	for i, r := range recs {
		must(WriteJSON(filepath.Join(work, "phases", fmt.Sprintf("%02d-%s.json", i+1, r.Name)), r))
	}
	doc, err := WriteReport(work, out)
	must(err)
	if doc.Pass || len(doc.Phases) != 5 {
		t.Fatalf("doc: pass %v, %d phases", doc.Pass, len(doc.Phases))
	}
	var back ReportDoc
	must(ReadJSON(filepath.Join(out, ReportJSON), &back))
	if len(back.Phases[1].Docs) != 1 || back.Phases[3].LogTail[1] != "empo2: cgo: ggml backend failure: boom" {
		t.Errorf("report JSON: bench docs %v, train log tail %v", back.Phases[1].Docs, back.Phases[3].LogTail)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportMD))
	must(err)
	for _, want := range []string{
		"| hf-bench | skipped | 0.0 | 60 / 150 | not started: needs ~60 s, 12 s left |",
		"| 8 | 512 | 2.00 | 256.0 |",
		"- ratio: {\"hf_over_empo2_time\":1.7}",
		"t_rollout=3.5, t_update=1.25",
		"ggml backend failure: boom",
		"**some phases failed or did not finish**",
		"- **gpu**: NVIDIA H100",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
