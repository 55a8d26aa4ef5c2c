package trainer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/internal/tfevents"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

// checkEventFile checks a finished run's TensorBoard file: one event file,
// the file version first, every record's CRCs, and exactly one value per
// (tag, step), equal (as float32) to metrics.jsonl's line of that step for
// every field — so a kill -9 and a resume leave one curve.
func checkEventFile(t *testing.T, dir string) {
	t.Helper()
	files, err := tfevents.Files(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("event files %v (%v), want exactly one", files, err)
	}
	got, err := tfevents.Scalars(files[0])
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	for _, m := range ms {
		step := int64(m["step"].(float64))
		for k, v := range m {
			f, ok := v.(float64)
			if !ok || k == "step" || k == "seed" {
				continue
			}
			if g, ok := got[tfevents.MetricTag(k)][step]; !ok || g != float32(f) {
				t.Errorf("step %d: %s = %v in metrics.jsonl, %v (present %v) in the event file", step, k, f, g, ok)
			}
		}
	}
	for _, tag := range []string{"train/score", "train/success", "update/kl", "update/clip_frac", "time/rollout_s"} {
		if len(got[tag]) != len(ms) {
			t.Errorf("%s: %d steps in the event file, %d in metrics.jsonl", tag, len(got[tag]), len(ms))
		}
	}
}

func TestTensorBoardOff(t *testing.T) {
	cfg := DefaultConfig()
	if !cfg.Logging.TensorBoard {
		t.Fatal("event files are off by default")
	}
	c, err := LoadConfig("", "empo2", []string{"logging.tensorboard=false"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Logging.TensorBoard {
		t.Fatal("logging.tensorboard=false did not switch it off")
	}
	// A run with it off writes no event file.
	cfg = tinyRunConfig(t, testutil.ModelFile(t), "empo2", 1, "logging.tensorboard=false")
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if files, err := tfevents.Files(dir); err != nil || len(files) != 0 {
		t.Fatalf("event files %v (%v), want none", files, err)
	}
}
