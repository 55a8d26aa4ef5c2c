package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The pre-registered gate of Study 3 (docs/experiment.md, issue 36): can
// the warm start use its memory? scripts/experiment.sh's gate stage writes,
// per evaluation seed S, GATE/pool-sS.json (adaptation trials on the
// training pool: a fresh memory per variation filled by the policy's own
// earlier trials, no weight update, and the same trials without memory)
// and GATE/heldout-sS.json (the same on held-out variations). Per seed,
// the score of trials 2…K (trial 1 has an empty memory in both settings)
// is averaged; with the per-seed values:
//
//	(1) pool:     D = mean(memory on) − mean(control), SE = sqrt(s_on²/n + s_off²/n);
//	              passes iff D > 2·SE
//	(2) held-out: passes iff D ≥ −2·SE (memory does not detectably fall below the control)
//
// The gate passes iff both do and there are at least 3 seeds.

// Gate verdicts.
const (
	GatePass = "PASS"
	GateFail = "FAIL"
)

// gateSeries is one setting's per-seed figures of one gate file kind.
type gateSeries struct {
	Seeds   []string
	On, Off []float64   // per seed: mean score of trials 2…K
	OnK     [][]float64 // per seed: the score per trial, memory on
	OffK    [][]float64
	Tips    []float64 // per seed: tips written per trial (memory on), mean
}

var gateFile = regexp.MustCompile(`^(pool|heldout)-s(\d+)\.json$`)

// loadGate reads DIR's gate files by kind ("pool", "heldout").
func loadGate(dir string) (map[string]*gateSeries, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("exptable: %w", err)
	}
	out := map[string]*gateSeries{}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		m := gateFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("exptable: %w", err)
		}
		type series struct {
			ScorePerTrial []float64 `json:"score_per_trial"`
			TipsPerTrial  []float64 `json:"tips_per_trial"`
		}
		var f struct {
			MemoryOn  series `json:"memory_on"`
			MemoryOff series `json:"memory_off"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("exptable: %s: %w", e.Name(), err)
		}
		on, off := f.MemoryOn.ScorePerTrial, f.MemoryOff.ScorePerTrial
		if len(on) < 2 || len(off) != len(on) {
			return nil, fmt.Errorf("%w: %s: want ≥ 2 trials in both settings (trial 1 has no memory), got %d and %d", ErrLayout, e.Name(), len(on), len(off))
		}
		s := out[m[1]]
		if s == nil {
			s = &gateSeries{}
			out[m[1]] = s
		}
		mOn, _ := meanStd(on[1:])
		mOff, _ := meanStd(off[1:])
		tips, _ := meanStd(f.MemoryOn.TipsPerTrial)
		s.Seeds = append(s.Seeds, m[2])
		s.On, s.Off = append(s.On, mOn), append(s.Off, mOff)
		s.OnK, s.OffK = append(s.OnK, on), append(s.OffK, off)
		s.Tips = append(s.Tips, tips)
	}
	if out["pool"] == nil {
		return nil, fmt.Errorf("%w: %s holds no pool-sS.json", ErrLayout, dir)
	}
	return out, nil
}

// gateResult is the gate's computation.
type gateResult struct {
	Pool, Held       decision
	PoolOK, HeldOK   bool
	HaveHeld, Enough bool
	Verdict          string
}

func computeGate(g map[string]*gateSeries) gateResult {
	var r gateResult
	p := g["pool"]
	r.Pool = decide(p.On, p.Off)
	r.PoolOK = !math.IsNaN(r.Pool.SE) && r.Pool.D > 2*r.Pool.SE
	r.Enough = len(p.On) >= 3
	if h := g["heldout"]; h != nil {
		r.HaveHeld = true
		r.Held = decide(h.On, h.Off)
		r.HeldOK = !math.IsNaN(r.Held.SE) && r.Held.D >= -2*r.Held.SE
	}
	r.Verdict = GateFail
	if r.PoolOK && r.HeldOK && r.Enough {
		r.Verdict = GatePass
	}
	return r
}

// writeGate prints the gate's table and verdict; its last line is
// "gate: PASS" or "gate: FAIL (reasons)".
func writeGate(w io.Writer, g map[string]*gateSeries) gateResult {
	r := computeGate(g)
	fmt.Fprintln(w, "## The gate: can the warm start use its memory? (pre-registered, docs/experiment.md, Study 3)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Adaptation trials with no weight update: a fresh memory per variation, filled by the policy's own earlier trials (a tip after each), against the same trials without memory (the control, same seeds). Per evaluation seed, the mean score of trials 2…K (trial 1 has no memory in either setting).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| variations | seed | memory on, trials 2…K | control | memory on per trial | control per trial | tips written per trial |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, kind := range []string{"pool", "heldout"} {
		s := g[kind]
		if s == nil {
			continue
		}
		name := map[string]string{"pool": "training pool", "heldout": "held-out"}[kind]
		for i, seed := range s.Seeds {
			fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | %s | %s | %.1f |\n", name, seed, s.On[i], s.Off[i], joinF(s.OnK[i]), joinF(s.OffK[i]), s.Tips[i])
		}
		mOn, sOn := meanStd(s.On)
		mOff, sOff := meanStd(s.Off)
		fmt.Fprintf(w, "| %s | mean ± std | %.1f ± %.1f | %.1f ± %.1f | | | |\n", name, mOn, sOn, mOff, sOff)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| test | n | D = on − control | SE | rule | passes |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	fmt.Fprintf(w, "| (1) training pool: memory helps | %d | %+.2f | %.2f | D > 2·SE = %.2f | %s |\n", r.Pool.NA, r.Pool.D, r.Pool.SE, 2*r.Pool.SE, yesNo(r.PoolOK))
	if r.HaveHeld {
		fmt.Fprintf(w, "| (2) held-out: memory does not fall below the control | %d | %+.2f | %.2f | D ≥ −2·SE = %.2f | %s |\n", r.Held.NA, r.Held.D, r.Held.SE, -2*r.Held.SE, yesNo(r.HeldOK))
	} else {
		fmt.Fprintln(w, "| (2) held-out: memory does not fall below the control | 0 | | | no heldout-sS.json | no |")
	}
	fmt.Fprintln(w)
	var why []string
	if !r.Enough {
		why = append(why, fmt.Sprintf("%d seeds (the rule needs 3)", len(g["pool"].On)))
	}
	if !r.PoolOK {
		why = append(why, "memory does not raise the pool score by more than 2·SE")
	}
	if !r.HeldOK {
		why = append(why, "held-out adaptation with memory falls below the control (or was not run)")
	}
	if r.Verdict == GatePass {
		fmt.Fprintln(w, "gate: PASS")
	} else {
		fmt.Fprintf(w, "gate: FAIL (%s)\n", strings.Join(why, "; "))
	}
	return r
}

func joinF(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, " → ")
}

func yesNo(b bool) string {
	if b {
		return "**yes**"
	}
	return "**no**"
}
