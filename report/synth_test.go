package report

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// synthRun describes one synthetic run directory written by writeSynthRun.
type synthRun struct {
	name   string
	preset string // "empo2" or "grpo": the config differs by preset and p
	seed   int64
	steps  int
	// evalEvery > 0 writes eval.jsonl every evalEvery steps.
	evalEvery int
	// evalFile writes eval/final.json; oodFile writes eval/ood.json.
	evalFile, oodFile bool
	// perRollout draws the mode per rollout ("mode":"mixed" with "modes").
	perRollout bool
	// truncateTail appends half a JSON line without a newline (kill -9).
	truncateTail bool
}

// writeSynthRun writes a run directory shaped like `empo2 train`'s (issue
// 11.5): config.yaml, metrics.jsonl, eval.jsonl, eval/*.json. The numbers are
// a noisy learning curve from a fixed seed; EMPO² learns faster than GRPO and
// retrieves tips, GRPO does not.
func writeSynthRun(t testing.TB, root string, s synthRun) string {
	t.Helper()
	dir := filepath.Join(root, s.name)
	must(t, os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o755))
	p := 0.25
	if s.preset == "grpo" {
		p = 0
	}
	cfg := fmt.Sprintf("preset: %s\nseed: %d\nsteps: %d\nmodel: m.gguf\nenv: textlab\nempo2:\n  p: %g\n  q: 0.68\nrollout:\n  temperature: 1\n  seed: %d\nupdate:\n  lr: 1.0e-05\n  epochs: 1\n",
		s.preset, s.seed, s.steps, p, s.seed)
	if s.perRollout {
		cfg += "mode:\n  per: rollout\n"
	}
	must(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644))

	rng := rand.New(rand.NewPCG(uint64(s.seed), 7))
	rate := 0.06
	if s.preset == "grpo" {
		rate = 0.035
	}
	start := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	mf, err := os.Create(filepath.Join(dir, "metrics.jsonl"))
	must(t, err)
	defer mf.Close()
	for step := 1; step <= s.steps; step++ {
		prog := 1 - math.Exp(-rate*float64(step))
		score := 100*0.85*prog + rng.NormFloat64()*8
		mode := "on-policy"
		row := map[string]any{"step": step, "seed": s.seed, "time": start.Add(time.Duration(step) * 30 * time.Second).Format(time.RFC3339)}
		row["score_mean"] = score
		row["success_rate"] = math.Max(0, math.Min(1, 0.8*prog+rng.NormFloat64()*0.08))
		tips := 0.0
		if s.preset == "empo2" {
			u := rng.Float64()
			switch {
			case u < 0.17:
				mode = "off-policy"
			case u < 0.25:
				mode = "on-policy-tips"
			}
			tips = 2.5 * prog * (1 + 0.2*rng.NormFloat64())
			row["tips_written"] = 16
			row["t_embed_retrieve"] = 1.5 + 0.3*rng.Float64()
			row["t_tips"] = 2.5 + 0.5*rng.Float64()
		}
		row["mode"] = mode
		if s.perRollout && s.preset == "empo2" {
			modes := map[string]int{}
			for range 8 {
				u := rng.Float64()
				switch {
				case u < 0.17:
					modes["off-policy"]++
				case u < 0.25:
					modes["on-policy-tips"]++
				default:
					modes["on-policy"]++
				}
			}
			row["mode"], row["modes"] = "mixed", modes
		}
		row["tips_retrieved_mean"] = tips
		row["reward_mean"] = score + 10*tips/(tips+1)
		row["loss"] = 0.3*math.Exp(-0.03*float64(step)) + 0.05*rng.NormFloat64()
		row["clip_frac"] = math.Max(0, 0.12+0.03*rng.NormFloat64())
		row["approx_kl"] = math.Max(0, 0.01+0.004*rng.NormFloat64())
		row["grad_norm"] = 1.2 + 0.3*rng.NormFloat64()
		row["masked_seqs"] = 0
		if mode == "off-policy" {
			row["masked_seqs"] = rng.IntN(4)
		}
		row["trained_tokens"] = 4000 + rng.IntN(800)
		row["rollout_tokens_per_s"] = 900 + 50*rng.NormFloat64()
		row["env_steps_per_s"] = 40 + 3*rng.NormFloat64()
		row["t_rollout"] = 20 + 2*rng.Float64()
		row["t_update"] = 8 + rng.Float64()
		b, err := json.Marshal(row)
		must(t, err)
		_, err = mf.Write(append(b, '\n'))
		must(t, err)
	}
	if s.truncateTail {
		_, err = mf.WriteString(`{"step":` + fmt.Sprint(s.steps+1) + `,"mode":"on-pol`)
		must(t, err)
	}

	side := func(on bool, step int) map[string]any {
		prog := 1 - math.Exp(-rate*float64(step))
		bonus := 0.0
		if on {
			bonus = 8
		}
		return map[string]any{
			"score_mean":   math.Round(10*(80*prog+bonus+rng.NormFloat64()*3)) / 10,
			"success_rate": math.Round(100*math.Min(1, 0.7*prog+bonus/100)) / 100,
			"episodes":     24,
			"tasks": map[string]any{
				"light-bulb":        map[string]any{"score_mean": math.Round(90*prog + bonus), "success_rate": 0.75, "episodes": 12},
				"find-living-thing": map[string]any{"score_mean": math.Round(70*prog + bonus), "success_rate": 0.5, "episodes": 12},
			},
		}
	}
	if s.evalEvery > 0 {
		ef, err := os.Create(filepath.Join(dir, "eval.jsonl"))
		must(t, err)
		defer ef.Close()
		for step := s.evalEvery; step <= s.steps; step += s.evalEvery {
			b, err := json.Marshal(map[string]any{"step": step, "memory_off": side(false, step), "memory_on": side(true, step)})
			must(t, err)
			_, err = ef.Write(append(b, '\n'))
			must(t, err)
		}
	}
	if s.evalFile || s.oodFile {
		must(t, os.MkdirAll(filepath.Join(dir, "eval"), 0o755))
	}
	if s.evalFile {
		b, err := json.MarshalIndent(map[string]any{"memory_off": side(false, s.steps), "memory_on": side(true, s.steps)}, "", "  ")
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, "eval", "final.json"), b, 0o644))
	}
	if s.oodFile {
		// trainer.OODReport's JSON (empo2 eval --ood --json).
		ood := map[string]any{
			"tasks":      []string{"held-out-a", "held-out-b"},
			"variations": 4,
			"trials":     5,
			"memory_on": map[string]any{
				"tips_per_trial":    []int{8, 8, 8, 8, 8},
				"score_per_trial":   []float64{22, 35, 44, 49, 52},
				"success_per_trial": []float64{0.1, 0.25, 0.35, 0.4, 0.45},
				"improvement":       30,
				"improvement_pct":   136.36,
			},
			"memory_off": map[string]any{
				"tips_per_trial":    []int{0, 0, 0, 0, 0},
				"score_per_trial":   []float64{22, 23, 21, 22, 23},
				"success_per_trial": []float64{0.1, 0.1, 0.08, 0.1, 0.12},
				"improvement":       1,
				"improvement_pct":   4.55,
			},
		}
		b, err := json.MarshalIndent(ood, "", "  ")
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, "eval", "ood.json"), b, 0o644))
		// A file of another schema: skipped with a warning, never fatal.
		must(t, os.WriteFile(filepath.Join(dir, "eval", "notes.json"), []byte(`{"comment":"hand-written"}`), 0o644))
	}
	return dir
}

// synthRuns writes the standard fixture: EMPO² and GRPO, three seeds each.
func synthRuns(t testing.TB, root string, steps int) []string {
	var dirs []string
	for _, preset := range []string{"empo2", "grpo"} {
		for seed := int64(1); seed <= 3; seed++ {
			dirs = append(dirs, writeSynthRun(t, root, synthRun{
				name: fmt.Sprintf("%s-s%d", preset, seed), preset: preset, seed: seed, steps: steps,
				evalEvery: 10, evalFile: seed == 1, oodFile: preset == "empo2" && seed == 1,
				truncateTail: preset == "grpo" && seed == 3, perRollout: preset == "empo2" && seed == 3,
			}))
		}
	}
	return dirs
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
