package trainer

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/trainer/internal/testutil"
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
