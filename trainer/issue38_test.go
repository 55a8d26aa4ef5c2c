package trainer

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
