package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/empo2/empo2/runfiles"
)

// filledMetrics is a runfiles.Metrics with every numeric field set to a
// distinct value (field i: i+1, and i+1.5 for floats and *float64), and the JSON name
// of each field mapped to its value.
func filledMetrics(t *testing.T) (runfiles.Metrics, map[string]float64) {
	t.Helper()
	var m runfiles.Metrics
	want := map[string]float64{}
	v := reflect.ValueOf(&m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64:
			v.Field(i).SetInt(int64(i + 1))
			want[name] = float64(i + 1)
		case reflect.Float64:
			v.Field(i).SetFloat(float64(i) + 1.5)
			want[name] = float64(i) + 1.5
		case reflect.Pointer: // optional fields (omitempty): *float64
			if f.Type.Elem().Kind() != reflect.Float64 {
				t.Fatalf("field %s: unexpected pointer type %s", f.Name, f.Type)
			}
			x := float64(i) + 1.5
			v.Field(i).Set(reflect.ValueOf(&x))
			want[name] = x
		}
	}
	m.Mode, m.Modes, m.Time = "mixed", map[string]int{"off-policy": 3, "on-policy": 1}, "2025-01-02T03:04:05Z"
	return m, want
}

// TestReportReadsTheContract: a metrics line as train writes it
// (runfiles.Metrics) read by LoadRun gives every field the report draws,
// with its value. A drawn field that the contract renames or removes fails
// here instead of silently dropping a curve.
func TestReportReadsTheContract(t *testing.T) {
	m, want := filledMetrics(t)
	names := map[string]bool{"mode": true, "modes": true, "time": true}
	for k := range want {
		names[k] = true
	}
	for _, k := range drawnMetrics() {
		if !names[k] {
			t.Errorf("the report draws %q, which runfiles.Metrics does not write", k)
		}
	}
	dir := t.TempDir()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, MetricsFile), append(b, '\n'), 0o644)
	r, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Metrics) != 1 {
		t.Fatalf("%d rows", len(r.Metrics))
	}
	row := r.Metrics[0]
	for _, k := range drawnMetrics() {
		switch k {
		case keyMode:
			if row.Mode != m.Mode {
				t.Errorf("mode %q, want %q", row.Mode, m.Mode)
			}
		case keyModes:
			if row.Modes["off-policy"] != 3 || row.Modes["on-policy"] != 1 {
				t.Errorf("modes %v", row.Modes)
			}
		case keyTime:
			if row.Time.IsZero() {
				t.Error("time not read")
			}
		default:
			if got, ok := row.Values[k]; !ok || got != want[k] {
				t.Errorf("%s = %v (present %v), want %v", k, got, ok, want[k])
			}
		}
	}
	if row.Step != want[keyStep] || r.Seed == nil || float64(*r.Seed) != want[keySeed] {
		t.Errorf("step %v seed %v", row.Step, r.Seed)
	}
}

// TestReportReadsEvalRecords: eval.jsonl lines (runfiles.EvalLine) and the
// eval/*.json reports (runfiles.EvalReport, runfiles.OODReport) as eval and
// train write them come back with their scores, per task, and their trial
// curves.
func TestReportReadsEvalRecords(t *testing.T) {
	dir := t.TempDir()
	side := func(score float64) *runfiles.EvalResult {
		return &runfiles.EvalResult{
			TaskResult: runfiles.TaskResult{ScoreMean: score, SuccessRate: score / 100, Episodes: 4, StepsMean: 7},
			Tasks:      map[string]runfiles.TaskResult{"melt": {ScoreMean: score + 1, SuccessRate: 0.5, Episodes: 2}},
		}
	}
	line := runfiles.EvalLine{Step: 5, Time: "2025-01-02T03:04:05Z", MemoryOff: side(10), MemoryOn: side(20)}
	b, _ := json.Marshal(line)
	os.WriteFile(filepath.Join(dir, EvalLogFile), append(b, '\n'), 0o644)
	os.MkdirAll(filepath.Join(dir, EvalDir), 0o755)
	rep := runfiles.EvalReport{MemoryOff: side(30), Split: "dev", Temperature: 0.4}
	b, _ = json.Marshal(rep)
	os.WriteFile(filepath.Join(dir, EvalDir, "final.json"), b, 0o644)
	ood := runfiles.OODReport{Tasks: []string{"boil"}, Variations: 2, Trials: 3,
		MemoryOn:  runfiles.OODSeries{ScorePerTrial: []float64{1, 2, 3}, SuccessPerTrial: []float64{0, 0.5, 1}, TipsPerTrial: []int{2, 2, 2}},
		MemoryOff: runfiles.OODSeries{ScorePerTrial: []float64{1, 1, 1}, SuccessPerTrial: []float64{0, 0, 0}}}
	b, _ = json.Marshal(ood)
	os.WriteFile(filepath.Join(dir, EvalDir, "ood.json"), b, 0o644)
	r, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Evals) != 1 || r.Evals[0].Step != 5 {
		t.Fatalf("evals %+v", r.Evals)
	}
	check := func(what string, s *EvalSide, score float64) {
		t.Helper()
		if s == nil || s.ScoreMean == nil || *s.ScoreMean != score || s.SuccessRate == nil || *s.SuccessRate != score/100 || s.Episodes != 4 ||
			s.Tasks["melt"].ScoreMean == nil || *s.Tasks["melt"].ScoreMean != score+1 || s.Tasks["melt"].Episodes != 2 {
			t.Errorf("%s: %+v", what, s)
		}
	}
	check("eval.jsonl memory off", r.Evals[0].MemoryOff, 10)
	check("eval.jsonl memory on", r.Evals[0].MemoryOn, 20)
	if len(r.EvalFiles) != 2 {
		t.Fatalf("eval files %+v (warnings %v)", r.EvalFiles, r.Warnings)
	}
	check("eval/final.json", r.EvalFiles[0].MemoryOff, 30)
	o := r.EvalFiles[1].OOD
	if o == nil || !slices.Equal(o.Score[true], ood.MemoryOn.ScorePerTrial) || !slices.Equal(o.Success[true], ood.MemoryOn.SuccessPerTrial) ||
		!slices.Equal(o.Score[false], ood.MemoryOff.ScorePerTrial) || !slices.Equal(o.Success[false], ood.MemoryOff.SuccessPerTrial) {
		t.Errorf("OOD curves %+v", o)
	}
}
