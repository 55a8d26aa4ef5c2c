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
	"strconv"
	"strings"
)

// The pre-registered gate of Study 3 (docs/experiment.md, issue 36): can
// the warm start use its memory? scripts/experiment.sh's gate stage writes,
// per evaluation seed S, GATE/pool-sS.json (adaptation trials on the
// training pool: a fresh memory per variation filled by the policy's own
// earlier trials, no weight update, and the same trials without memory)
// and GATE/heldout-sS.json (the same on held-out variations). Per seed,
// the score of trials 2…K (trial 1 has an empty memory in both settings)
// is averaged; with the per-seed values, two rules (docs/experiment.md):
//
// paired (gate run 9 on, the default): both settings play each seed's
// trial 1 alike, so the unit is the seed's difference d_s = on_s − off_s:
//
//	(1) pool:     D = mean(d_s), SE = sd(d_s)/√n; passes iff D > 2·SE
//	(2) held-out: passes iff D ≥ −2·SE (memory does not detectably fall below the control)
//	needs n ≥ 10 seeds (an SE from fewer differences is too rough to decide on)
//
// unpaired (gate runs 1–8): SE = sqrt(s_on²/n + s_off²/n), the same two
// tests, n ≥ 3 seeds.
//
// The gate passes iff both tests do and there are enough seeds.

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
	// the gate's files, parsed once, by kind then seed number (s2 before s10)
	type gateEnt struct {
		name, kind, seed string
		n                int
	}
	var files []gateEnt
	for _, e := range ents {
		if m := gateFile.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[2])
			files = append(files, gateEnt{e.Name(), m[1], m[2], n})
		}
	}
	sort.Slice(files, func(i, j int) bool {
		if files[i].kind != files[j].kind {
			return files[i].kind < files[j].kind
		}
		return files[i].n < files[j].n
	})
	for _, e := range files {
		b, err := os.ReadFile(filepath.Join(dir, e.name))
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
			return nil, fmt.Errorf("exptable: %s: %w", e.name, err)
		}
		on, off := f.MemoryOn.ScorePerTrial, f.MemoryOff.ScorePerTrial
		if len(on) < 2 || len(off) != len(on) {
			return nil, fmt.Errorf("%w: %s: want ≥ 2 trials in both settings (trial 1 has no memory), got %d and %d", ErrLayout, e.name, len(on), len(off))
		}
		s := out[e.kind]
		if s == nil {
			s = &gateSeries{}
			out[e.kind] = s
		}
		mOn, _ := meanStd(on[1:])
		mOff, _ := meanStd(off[1:])
		tips, _ := meanStd(f.MemoryOn.TipsPerTrial)
		s.Seeds = append(s.Seeds, e.seed)
		s.On, s.Off = append(s.On, mOn), append(s.Off, mOff)
		s.OnK, s.OffK = append(s.OnK, on), append(s.OffK, off)
		s.Tips = append(s.Tips, tips)
	}
	if out["pool"] == nil {
		return nil, fmt.Errorf("%w: %s holds no pool-sS.json", ErrLayout, dir)
	}
	return out, nil
}

// The gate's rules (the -gate-rule flag).
const (
	RulePaired   = "paired"
	RuleUnpaired = "unpaired"
)

// gateRules: each rule's test statistic and the fewest seeds it decides on.
var gateRules = map[string]struct {
	decide   func(on, off []float64) decision
	minSeeds int
}{
	RulePaired:   {decidePaired, 10},
	RuleUnpaired: {decide, 3},
}

// gateResult is the gate's computation.
type gateResult struct {
	Rule             string
	Pool, Held       decision // by Rule
	PoolU, HeldU     decision // unpaired, shown beside the paired rule
	PoolOK, HeldOK   bool
	HaveHeld, Enough bool
	Verdict          string
}

// decidePaired is D = mean(a_i − b_i), SE = sd(a_i − b_i)/√n (n ≥ 2; NaN SE below).
func decidePaired(a, b []float64) decision {
	if len(a) != len(b) {
		panic("exptable: decidePaired: unequal lengths")
	}
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	out := decision{NA: len(a), NB: len(b), D: math.NaN(), SE: math.NaN()}
	if len(d) == 0 {
		return out
	}
	m, sd := meanStd(d)
	out.D = m
	if len(d) >= 2 {
		out.SE = sd / math.Sqrt(float64(len(d)))
	}
	return out
}

func computeGate(g map[string]*gateSeries, rule string) gateResult {
	r := gateResult{Rule: rule}
	gr, ok := gateRules[rule]
	if !ok {
		panic("exptable: unknown gate rule " + rule)
	}
	pick := gr.decide
	p := g["pool"]
	r.Pool, r.PoolU = pick(p.On, p.Off), decide(p.On, p.Off)
	r.PoolOK = !math.IsNaN(r.Pool.SE) && r.Pool.D > 2*r.Pool.SE
	r.Enough = len(p.On) >= gr.minSeeds
	if h := g["heldout"]; h != nil {
		r.HaveHeld = true
		r.Held, r.HeldU = pick(h.On, h.Off), decide(h.On, h.Off)
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
func writeGate(w io.Writer, g map[string]*gateSeries, rule string) gateResult {
	r := computeGate(g, rule)
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
	if rule == RulePaired {
		fmt.Fprintln(w, "Rule: **paired** (docs/experiment.md, gate run 9 on): SE = sd over seeds of the per-seed difference / √n, at least 10 seeds; the unpaired SE of gate runs 1–8 is shown beside it, not decided on.")
	} else {
		fmt.Fprintln(w, "Rule: **unpaired** (gate runs 1–8): SE = sqrt(s_on²/n + s_off²/n), at least 3 seeds.")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| test | n | D = on − control | SE | rule | passes | unpaired SE |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	fmt.Fprintf(w, "| (1) training pool: memory helps | %d | %+.2f | %.2f | D > 2·SE = %.2f | %s | %.2f |\n", r.Pool.NA, r.Pool.D, r.Pool.SE, 2*r.Pool.SE, yesNo(r.PoolOK), r.PoolU.SE)
	if r.HaveHeld {
		fmt.Fprintf(w, "| (2) held-out: memory does not fall below the control | %d | %+.2f | %.2f | D ≥ −2·SE = %.2f | %s | %.2f |\n", r.Held.NA, r.Held.D, r.Held.SE, -2*r.Held.SE, yesNo(r.HeldOK), r.HeldU.SE)
	} else {
		fmt.Fprintln(w, "| (2) held-out: memory does not fall below the control | 0 | | | no heldout-sS.json | no | |")
	}
	fmt.Fprintln(w)
	var why []string
	if !r.Enough {
		why = append(why, fmt.Sprintf("%d seeds (the %s rule needs %d)", len(g["pool"].On), rule, gateRules[rule].minSeeds))
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
