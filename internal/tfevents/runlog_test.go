package tfevents

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func metricsLine(step int, score float64) string {
	b, _ := json.Marshal(map[string]any{
		"step": step, "mode": "on-policy", "time": time.Date(2026, 1, 2, 3, 4, step, 0, time.UTC).Format(time.RFC3339),
		"seed": 1, "score_mean": score, "success_rate": score / 100, "approx_kl": 0.001 * float64(step),
		"clip_frac": 0.1, "t_rollout": 2.5, "tips_true_frac": 0.25, "end_reasons": map[string]int{"done": 3, "step-limit": 1},
		"some_new_field": 7,
	})
	return string(b) + "\n"
}

func evalLine(step int) string {
	return fmt.Sprintf(`{"step":%d,"memory_off":{"score_mean":%d,"success_rate":0.5,"episodes":4},"memory_on":{"score_mean":%d,"success_rate":0.75,"episodes":4}}`+"\n", step, step, step+1)
}

// readRun reads dir's only event file (Scalars).
func readRun(t *testing.T, dir string) map[string]map[int64]float32 {
	t.Helper()
	files, err := Files(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("event files %v (%v), want one", files, err)
	}
	out, err := Scalars(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunLogFollowsTheJSONL(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, metricsFile)
	// Two steps written, a third cut short by a kill.
	if err := os.WriteFile(m, []byte(metricsLine(1, 10)+metricsLine(2, 20)+`{"step":3,"sco`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, evalFile), []byte(evalLine(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(l.Path()), FilePrefix) {
		t.Fatalf("file %s", l.Path())
	}
	if err := l.Metrics([]byte(metricsLine(3, 30))); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := readRun(t, dir)
	want := map[string]map[int64]float32{
		"train/score":             {1: 10, 2: 20, 3: 30},
		"train/success":           {1: 0.1, 2: 0.2, 3: 0.3},
		"update/kl":               {1: 0.001, 2: 0.002, 3: 0.003},
		"update/clip_frac":        {1: 0.1, 2: 0.1, 3: 0.1},
		"time/rollout_s":          {1: 2.5, 2: 2.5, 3: 2.5},
		"memory/tips_true_frac":   {1: 0.25, 2: 0.25, 3: 0.25},
		"episodes/end_done":       {1: 3, 2: 3, 3: 3},
		"episodes/end_step-limit": {1: 1, 2: 1, 3: 1},
		"mode/on-policy":          {1: 1, 2: 1, 3: 1},
		"other/some_new_field":    {1: 7, 2: 7, 3: 7},
		"eval/memory_off/score":   {2: 2},
		"eval/memory_off/success": {2: 0.5},
		"eval/memory_on/score":    {2: 3},
		"eval/memory_on/success":  {2: 0.75},
	}
	if len(got) != len(want) {
		t.Errorf("tags %v, want %v", keys(got), keys(want))
	}
	for tag, steps := range want {
		for s, v := range steps {
			if got[tag][s] != v {
				t.Errorf("%s step %d = %v, want %v", tag, s, got[tag][s], v)
			}
		}
		if len(got[tag]) != len(steps) {
			t.Errorf("%s: steps %v, want %v", tag, got[tag], steps)
		}
	}

	// A resume rolls metrics.jsonl back to step 1 and writes step 2 again:
	// OpenRun replaces the event file, the run appends, one value per step.
	if err := os.WriteFile(m, []byte(metricsLine(1, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, evalFile))
	time.Sleep(1100 * time.Millisecond) // a later file name
	l, err = OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Metrics([]byte(metricsLine(2, 21))); err != nil {
		t.Fatal(err)
	}
	l.Close()
	got = readRun(t, dir)
	if s := got["train/score"]; len(s) != 2 || s[1] != 10 || s[2] != 21 {
		t.Fatalf("after resume train/score = %v, want {1:10 2:21}", s)
	}
	if len(got["eval/memory_off/score"]) != 0 {
		t.Fatalf("rolled-back eval still there: %v", got["eval/memory_off/score"])
	}
	// Wall times are the lines' times, not the rewrite's.
	f, _ := Files(dir)
	fh, _ := os.Open(f[0])
	evs, _ := ReadEvents(fh)
	fh.Close()
	if w := time.Unix(0, int64(evs[1].WallTime*1e9)).UTC(); !w.Equal(time.Date(2026, 1, 2, 3, 4, 1, 0, time.UTC)) {
		t.Errorf("step 1 wall time %v", w)
	}
}

func TestRunLogRefusesACorruptLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, metricsFile), []byte("{not json}\n"+metricsLine(2, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRun(dir); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:1") {
		t.Fatalf("err %v, want the file and line", err)
	}
	if f, _ := Files(dir); len(f) != 0 {
		t.Fatalf("left %v", f)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestScalarsRefusesARepeatedStep(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := OpenRun(dir)
	must(err)
	must(l.Metrics([]byte(metricsLine(1, 10))))
	must(l.Metrics([]byte(metricsLine(1, 11))))
	must(l.Close())
	if _, err := Scalars(l.Path()); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Fatalf("err %v, want a repeated step", err)
	}
}
