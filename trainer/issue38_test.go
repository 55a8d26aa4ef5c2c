package trainer

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// device gpu where ggml has no GPU device is refused before the run starts,
// naming the setting and what to do (it trained on the CPU silently;
// docs/gpu.md says it is an error).
func TestTrainDeviceGPUWithoutGPU(t *testing.T) {
	if gpuPresent() {
		t.Skip("a GPU device is loaded")
	}
	cfg := tinyRunConfig(t, testutil.ModelFile(t), "grpo", 1)
	cfg.Device = "gpu"
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg})
	if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "device gpu: no GPU device") || !strings.Contains(err.Error(), "device: auto") {
		t.Fatalf("device gpu without a GPU: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused start left %s: %v", dir, err)
	}
}

// A step without updates says why (issue 38 §6): every response masked
// names the count and δ; equal scores in every group say so.
func TestNoUpdateReason(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Batch.Tasks = 2
	var m StepMetrics
	m.SampleSteps, m.MaskedSeqs = 12, 12
	got := NoUpdateReason(m, cfg)
	if !strings.Contains(got, "0 updates: all 12 responses masked (old log-prob < δ = -5") {
		t.Errorf("all masked: %q", got)
	}
	m.ZeroVarGroups = 1
	if got := NoUpdateReason(m, cfg); !strings.Contains(got, "all 12 responses masked") || !strings.Contains(got, "the other 1 of 2 groups had equal scores") {
		t.Errorf("masked and equal scores: %q", got)
	}
	m = StepMetrics{}
	m.ZeroVarGroups = 2
	if got := NoUpdateReason(m, cfg); !strings.Contains(got, "in all 2 groups every episode had equal scores") {
		t.Errorf("equal scores: %q", got)
	}
	m.Updates = 1
	if got := NoUpdateReason(m, cfg); got != "" {
		t.Errorf("a step with an update: %q", got)
	}
}

// The output guard's run marker is the trainer's.
func TestRunMarkerIsSafefiles(t *testing.T) {
	if RunFile != safefile.RunMarker {
		t.Fatalf("trainer.RunFile %q, safefile.RunMarker %q", RunFile, safefile.RunMarker)
	}
}

// Masking is decided from the rollout's own log-probs before π_old is
// recomputed (issue 38 §6): a step whose every response is below δ by more
// than the rollout/engine difference recomputes nothing and masks all;
// a response just below δ (within that difference) is still recomputed and
// judged on the recompute.
func TestMaskingDecidedBeforeRecompute(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var eps []rollout.Episode
	for k := 0; k < 3; k++ {
		eps = append(eps, synthEpisode(r, 0, float64(10*k), 3, true, 100))
	}
	for i := range eps {
		for s := range eps[i].Steps {
			eps[i].Steps[s].OldLogp[0] = -12 // an untrained 152k-vocabulary model
		}
	}
	dc := DefaultConfig()
	cfg := dc.SampleConfig()
	cfg.RecomputeOldLogp = true
	rec := &recordProber{}
	ss, st, err := BuildSamples(inMode(eps, ModeOffPolicy), cfg, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.seen) != 0 || len(ss) != 0 || st.MaskedSteps != st.Steps || st.Steps != 9 {
		t.Fatalf("all below δ: %d sequences recomputed, %d samples, masked %d of %d", len(rec.seen), len(ss), st.MaskedSteps, st.Steps)
	}
	var m StepMetrics
	m.addSamples(st)
	if got := NoUpdateReason(m, dc); !strings.Contains(got, "all 9 responses masked") {
		t.Errorf("reason: %q", got)
	}
	for i := range eps {
		for s := range eps[i].Steps {
			eps[i].Steps[s].OldLogp[0] = cfg.LowProbThreshold - 0.01 // within the tolerance: the recompute (-1) decides
		}
	}
	rec = &recordProber{}
	ss, st, err = BuildSamples(inMode(eps, ModeOffPolicy), cfg, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.seen) == 0 || st.MaskedSteps != 0 || len(ss) == 0 {
		t.Fatalf("just below δ: %d recomputed, masked %d, %d samples", len(rec.seen), st.MaskedSteps, len(ss))
	}
}

// eval on ScienceWorld (the fake gateway standing in for the JVM) starts
// one JVM per episode in play and reuses them (issue 38 §6: `eval` started a
// JVM per episode, 1,819 for one run's evaluation).
func TestScienceWorldEvalReusesJVMs(t *testing.T) {
	mcfg := modelgen.DefaultConfig()
	mcfg.Ctx = 4096
	model := filepath.Join(t.TempDir(), "tiny4k.gguf")
	if err := modelgen.Write(model, mcfg); err != nil {
		t.Fatal(err)
	}
	launches := filepath.Join(t.TempDir(), "launches")
	sets := append(fakeScienceWorld(t), "model="+model, "env=scienceworld", "tasks=[power-component]", "eval.episodes=3",
		"eval.max_variations=2", "parallel=2", "threads=1", "rollout.max_action_tokens=6", "rollout.step_limit=2")
	t.Setenv("FAKE_SCIENCEWORLD_LAUNCHES", launches)
	cfg, err := evaluate.LoadRunConfig("", sets)
	if err != nil {
		t.Fatal(err)
	}
	res, err := evaluate.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(launches)
	if n := strings.Count(string(b), "launch"); res.Report.MemoryOff.Episodes != 6 || n != 2 {
		t.Fatalf("%d episodes, %d JVM launches (want 6 episodes on 2 JVMs)", res.Report.MemoryOff.Episodes, n)
	}
}
