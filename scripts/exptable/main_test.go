package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/trainer/rollout"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMeanStd(t *testing.T) {
	m, s := meanStd([]float64{1, 2, 3, 4})
	if m != 2.5 || math.Abs(s-math.Sqrt(5.0/3)) > 1e-12 {
		t.Fatalf("meanStd = %v, %v; want 2.5, sqrt(5/3) (sample std)", m, s)
	}
	if m, s := meanStd([]float64{7}); m != 7 || s != 0 {
		t.Fatalf("one value: %v ± %v", m, s)
	}
	if m, _ := meanStd(nil); !math.IsNaN(m) {
		t.Fatalf("no values: %v", m)
	}
}

// TestTable builds a small experiment directory by hand and checks the
// figures the table and the diagnosis derive from it.
func TestTable(t *testing.T) {
	out := t.TempDir()
	write(t, filepath.Join(out, "warmstart/eval/test-off.json"),
		`{"memory_off":{"score_mean":-20,"success_rate":0.1,"episodes":10,"tasks":{}},"split":"test"}`)
	write(t, filepath.Join(out, "warmstart/eval/sft-families-test-off.json"),
		`{"memory_off":{"score_mean":30,"success_rate":0.5,"episodes":4,"tasks":{"melt":{"score_mean":50,"success_rate":1,"episodes":2},"light-bulb":{"score_mean":10,"success_rate":0,"episodes":2}}}}`)
	for seed, rate := range map[string]string{"1": "0.5", "2": "0.7"} {
		dir := filepath.Join(out, "runs", "empo2-s"+seed)
		write(t, filepath.Join(dir, "eval/test-off.json"), `{"memory_off":{"score_mean":40,"success_rate":`+rate+`,"episodes":10}}`)
		write(t, filepath.Join(dir, "eval/pool.json"),
			`{"memory_off":{"score_mean":10,"success_rate":0.25,"episodes":4},"memory_on":{"score_mean":30,"success_rate":0.75,"episodes":4}}`)
		write(t, filepath.Join(dir, "eval/ood-heldout.json"),
			`{"tasks":["boil","freeze"],"variations":4,"trials":3,
			  "memory_on":{"score_per_trial":[10,20,`+map[string]string{"1": "30", "2": "50"}[seed]+`],"success_per_trial":[0,0.25,0.5]},
			  "memory_off":{"score_per_trial":[10,10,10],"success_per_trial":[0,0,0]}}`)
		write(t, filepath.Join(dir, "metrics.jsonl"),
			`{"step":0,"mode":"on-policy","episodes":16,"score_mean":10,"success_rate":0.25,"env_steps":100,"sequences":16,"masked_seqs":0,"updates":2,"approx_kl":0.01,"clip_frac":0.1,"t_step":3}
{"step":1,"mode":"off-policy","episodes":16,"score_mean":30,"success_rate":0.5,"env_steps":80,"sequences":16,"masked_seqs":4,"updates":2,"approx_kl":-0.03,"clip_frac":0.3,"tips_retrieved_mean":2,"tips_written":16,"t_step":5,"zero_var_groups":`+
				map[string]string{"1": `1`, "2": `0,"sample_steps":40`}[seed]+`}
`)
		// seed 1: no sample_steps (older metrics): the masking rate's
		// denominator is estimated from env_steps and the group size
		write(t, filepath.Join(dir, "config.yaml"), "steps: 2\nbatch:\n  tasks: 4\n  rollouts: 4\n")
		write(t, filepath.Join(dir, "memory.jsonl"),
			`{"namespace":"find-living-thing/0","content":"The frog is in the greenhouse. (At this step the action was \"look around\"; the episode ended with score 100/100.)","score":100,"step":1}
{"namespace":"find-living-thing/0","content":"The frog is in the greenhouse. (At this step the action was \"focus on frog\"; the episode ended with score 100/100.)","score":100,"step":1}
`)
	}
	write(t, filepath.Join(out, "runs/notarun/x"), "")
	runs, err := load(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want warm start + 2 seeds", len(runs))
	}
	var tab, diag bytes.Buffer
	writeTable(&tab, runs)
	writeDiagnosis(&diag, runs)
	got := tab.String()
	for _, want := range []string{
		"| warm start | 1 | 10.0 | -20.0 | — |",
		"| empo2 | 2 | 60.0 ± 14.1 | 40.0 ± 0.0 | 25.0 ± 0.0 | 75.0 ± 0.0 | 10.0 ± 0.0 | 30.0 ± 0.0 |",
		"10.0 ± 0.0 → 40.0 ± 14.1 | 10.0 ± 0.0 → 10.0 ± 0.0 | 0.0 ± 0.0 → 50.0 ± 0.0 |",
		"trial 1 → trial 3",
		"The warm start on its SFT families (test variations, memory off; success / score (episodes)): 50.0 % / 30.0 over 4 episodes — light-bulb 0 % / 10.0 (2), melt 100 % / 50.0 (2).",
		"| empo2 | 2.0 ± 0.0 | 32.0 ± 0.0 | 180.0 ± 0.0 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	d := diag.String()
	for _, want := range []string{
		"| 1 | off-policy 1, on-policy 1 | off-policy 30.0, on-policy 10.0 | 4 / ≈ 60 (6.7%) | 1 | 0.2 | -0.01 / 0.03 |",
		"| 2 | off-policy 1, on-policy 1 | off-policy 30.0, on-policy 10.0 | 4 / 40 (10.0%) | 0 | 0.2 | -0.01 / 0.03 |",
		`"The frog is in the greenhouse."`,
		"2 entries, 1 distinct tips",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "## warm start") {
		t.Error("the warm start has no training metrics and gets no diagnosis section")
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := load(t.TempDir()); !errors.Is(err, ErrLayout) {
		t.Fatalf("empty dir: %v, want ErrLayout", err)
	}
	out := t.TempDir()
	write(t, filepath.Join(out, "runs/grpo-s1/eval/test-off.json"), `{"memory_off":`)
	if _, err := load(out); err == nil || !strings.Contains(err.Error(), "test-off.json") {
		t.Fatalf("broken JSON: %v, want an error naming the file", err)
	}
	out = t.TempDir()
	write(t, filepath.Join(out, "runs/grpo-s1/metrics.jsonl"), "{\"step\":0}\nnot json\n")
	if _, err := load(out); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:2") {
		t.Fatalf("broken metrics line: %v, want file:line", err)
	}
}

// TestDecide: the pre-registered rule on hand-computed cases. a = {10, 12,
// 14} and b = {4, 6, 8} have sample std 2 each, so SE = sqrt(4/3 + 4/3) =
// sqrt(8/3) ≈ 1.63299 and 2·SE ≈ 3.26599.
func TestDecide(t *testing.T) {
	se := math.Sqrt(8.0 / 3)
	for _, c := range []struct {
		name    string
		a, b    []float64
		d, se   float64
		verdict string
	}{
		{"better", []float64{10, 12, 14}, []float64{4, 6, 8}, 6, se, VerdictBetter},
		{"worse", []float64{4, 6, 8}, []float64{10, 12, 14}, -6, se, VerdictWorse},
		{"within 2 SE", []float64{10, 12, 14}, []float64{8, 10, 12}, 2, se, VerdictNoDiff},
		{"within 2 SE below", []float64{8, 10, 12}, []float64{10, 12, 14}, -2, se, VerdictNoDiff},
		// unequal n: s_a² = 450 (n 2), s_b² = 1 (n 3): SE = sqrt(225 + 1/3)
		{"unequal n", []float64{0, 30}, []float64{1, 2, 3}, 13, math.Sqrt(225 + 1.0/3), VerdictNoDiff},
		// equal seeds, no spread: SE 0, any positive difference decides
		{"no spread", []float64{5, 5}, []float64{3, 3}, 2, 0, VerdictBetter},
		{"identical", []float64{5, 5}, []float64{5, 5}, 0, 0, VerdictNoDiff},
	} {
		got := decide(c.a, c.b)
		if math.Abs(got.D-c.d) > 1e-12 || math.Abs(got.SE-c.se) > 1e-12 || got.Verdict != c.verdict {
			t.Errorf("%s: D %v SE %v %q; want D %v SE %v %q", c.name, got.D, got.SE, got.Verdict, c.d, c.se, c.verdict)
		}
	}
	if got := decide([]float64{5}, []float64{1, 2}); got.Verdict != VerdictUndecided || got.D != 3.5 || !math.IsNaN(got.SE) {
		t.Errorf("one seed: %+v, want undecided with D 3.5 and no SE", got)
	}
}

// TestDecisionAndTraining: the table's decision row is computed from the
// runs' held-out scores (the "better" case of TestDecide), and its
// training section from their metrics: mode mix, updates, masking, clip,
// true tips and context ends.
func TestDecisionAndTraining(t *testing.T) {
	out := t.TempDir()
	scores := map[string][]string{"grpo": {"4", "6", "8"}, "empo2": {"10", "12", "14"}, "empo2-paper": {"8", "10", "12"}}
	for arm, sc := range scores {
		for i, v := range sc {
			dir := filepath.Join(out, "runs", arm+"-s"+string(rune('1'+i)))
			write(t, filepath.Join(dir, "eval/test-off.json"), `{"memory_off":{"score_mean":`+v+`,"success_rate":0,"episodes":36}}`)
			metrics := `{"step":0,"mode":"on-policy","episodes":16,"sample_steps":100,"masked_seqs":0,"updates":4,"clip_frac":0.02,"end_reasons":{"done":10,"step-limit":6,"context":0}}
{"step":1,"mode":"on-policy","episodes":16,"sample_steps":0,"updates":0,"end_reasons":{"done":10,"step-limit":6,"context":0}}
`
			if arm != "grpo" {
				metrics = `{"step":0,"mode":"off-policy","episodes":16,"sample_steps":100,"masked_seqs":10,"updates":4,"clip_frac":0.04,"tips_true_frac":0.25,"tips_wellformed_frac":0.5,"end_reasons":{"done":8,"step-limit":4,"context":4}}
{"step":1,"mode":"on-policy-tips","episodes":16,"sample_steps":60,"masked_seqs":0,"updates":4,"clip_frac":0.02,"tips_true_frac":0.75,"tips_wellformed_frac":1,"end_reasons":{"done":16,"context":0}}
{"step":2,"mode":"on-policy","episodes":16,"sample_steps":40,"masked_seqs":0,"updates":4,"clip_frac":0,"end_reasons":{"done":16}}
{"step":3,"mode":"on-policy","episodes":16,"sample_steps":0,"updates":0,"end_reasons":{"done":16}}
`
			}
			write(t, filepath.Join(dir, "metrics.jsonl"), metrics)
			if arm != "grpo" { // two episodes' tips of 6 and 2 characters, the first entered at two steps
				var mem strings.Builder
				for _, e := range []struct{ ep, tip, action string }{
					{"e1", "I went", "look around"}, {"e1", "I went", "go to kitchen"},
					{"e2", "ok", `say "x (At this step the action was "y"; the episode ended with score 3/100.)"`},
				} {
					b, _ := json.Marshal(map[string]any{"episode": e.ep, "content": rollout.TipContent(e.tip, e.action, 10)})
					mem.Write(append(b, '\n'))
				}
				write(t, filepath.Join(dir, "memory.jsonl"), mem.String())
			}
		}
	}
	runs, err := load(out)
	if err != nil {
		t.Fatal(err)
	}
	var tab bytes.Buffer
	writeTable(&tab, runs)
	got := tab.String()
	for _, want := range []string{
		"| empo2 − grpo | 3 vs 3 | 6.00 | 1.63 | 3.27 | **EMPO² better** | 0.00 | 0.00 | no difference detectable |",
		"| empo2-paper − grpo | 3 vs 3 | 4.00 | 1.63 | 3.27 | **EMPO² better** |",
		// memory 2/4 steps, off-policy 1/4; updates 4 over the 3 updating
		// steps; masked 10/200; clip (4+2+0)/3 %; true tips (25+75)/2 %;
		// well-formed (50+100)/2 %; tip length (6+2)/2 characters;
		// context ends 4/64; the off-policy step's 4 updates in each seed
		"| empo2 | 50.0 ± 0.0 | 25.0 ± 0.0 | 4.0 ± 0.0 | 4, 4, 4 | 5.0 ± 0.0 | 2.0 ± 0.0 | 50.0 ± 0.0 | 75.0 ± 0.0 | 4.0 ± 0.0 | 6.2 ± 0.0 |",
		"| grpo | 0.0 ± 0.0 | 0.0 ± 0.0 | 4.0 ± 0.0 | 0, 0, 0 | 0.0 ± 0.0 | 2.0 ± 0.0 | — | — | — | 0.0 ± 0.0 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "**Decision**") > strings.Index(got, "**Held-out variations") {
		t.Error("the decision comes first in the table")
	}
}
