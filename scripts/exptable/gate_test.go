package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeOOD writes an `empo2 eval --ood --json` file with these per-trial scores.
func writeOOD(t *testing.T, dir, name string, on, off []float64) {
	t.Helper()
	js := func(xs []float64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = fmt.Sprint(x)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	body := fmt.Sprintf(`{"variations":4,"trials":%d,"memory_on":{"score_per_trial":%s,"tips_per_trial":[4,4,4]},"memory_off":{"score_per_trial":%s}}`,
		len(on), js(on), js(off))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGate: trial 1 is left out (no memory in either setting); the pool
// test needs D > 2·SE over the seeds' means of trials 2…K, the held-out test
// D ≥ −2·SE, and 3 seeds.
func runGate(t *testing.T, pool, held [][2][]float64, rule string) (gateResult, string) {
	t.Helper()
	dir := t.TempDir()
	for i, p := range pool {
		writeOOD(t, dir, fmt.Sprintf("pool-s%d.json", i+1), p[0], p[1])
	}
	for i, h := range held {
		writeOOD(t, dir, fmt.Sprintf("heldout-s%d.json", i+1), h[0], h[1])
	}
	g, err := loadGate(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r := writeGate(&b, g, rule)
	return r, b.String()
}

func TestGate(t *testing.T) {
	run := func(pool, held [][2][]float64) (gateResult, string) { return runGate(t, pool, held, RuleUnpaired) }
	tr := func(on, off []float64) [2][]float64 { return [2][]float64{on, off} }
	// memory raises trials 2–3 by ≈ 10 ± 1: passes; trial 1's −50 is ignored
	pool := [][2][]float64{tr([]float64{-50, 30, 32}, []float64{20, 20, 21}), tr([]float64{0, 31, 29}, []float64{20, 19, 20}), tr([]float64{10, 30, 30}, []float64{21, 20, 20})}
	held := [][2][]float64{tr([]float64{5, 5, 5}, []float64{5, 6, 5}), tr([]float64{5, 5, 6}, []float64{5, 5, 5}), tr([]float64{4, 5, 5}, []float64{5, 5, 5})}
	r, text := run(pool, held)
	if r.Verdict != GatePass || !strings.HasSuffix(text, "gate: PASS\n") {
		t.Fatalf("want PASS:\n%s", text)
	}
	if d := r.Pool.D; d < 9.8 || d > 10.4 {
		t.Errorf("pool D %.2f: want ≈ 10.2 (trials 2–3 only)", d)
	}
	// held-out memory far below the control: fails on (2)
	badHeld := [][2][]float64{tr([]float64{5, 0, 0}, []float64{5, 6, 5}), tr([]float64{5, 1, 0}, []float64{5, 5, 5}), tr([]float64{4, 0, 1}, []float64{5, 5, 5})}
	r, text = run(pool, badHeld)
	if r.Verdict != GateFail || r.HeldOK || !strings.Contains(text, "gate: FAIL (held-out") {
		t.Fatalf("want FAIL on the held-out test:\n%s", text)
	}
	// noise as large as the difference: fails on (1)
	noisy := [][2][]float64{tr([]float64{0, 60, 60}, []float64{0, 20, 20}), tr([]float64{0, 0, 0}, []float64{0, 20, 20}), tr([]float64{0, 30, 30}, []float64{0, 20, 20})}
	r, _ = run(noisy, held)
	if r.Verdict != GateFail || r.PoolOK {
		t.Fatalf("want FAIL on the pool test: %+v", r)
	}
	// two seeds never pass
	r, text = run(pool[:2], held[:2])
	if r.Verdict != GateFail || !strings.Contains(text, "2 seeds") {
		t.Fatalf("want FAIL with 2 seeds:\n%s", text)
	}
	// no pool file: a layout error
	if _, err := loadGate(t.TempDir()); !errors.Is(err, ErrLayout) {
		t.Fatalf("empty dir: %v", err)
	}
}

// TestGatePaired: the paired rule (gate run 9 on) takes each seed's
// difference as the unit. Checked against a from-scratch computation: a
// control that moves 40 points between seeds while memory adds 8 ± 2 at
// every seed fails the unpaired rule and passes the paired one; differences
// of ±20 around +2 fail it; fewer than 10 seeds never pass.
func TestGatePaired(t *testing.T) {
	tr := func(on, off []float64) [2][]float64 { return [2][]float64{on, off} }
	var pool, held [][2][]float64
	var diffs []float64
	for s := 0; s < 10; s++ {
		base := float64(20 + 40*(s%2)) // the control's seed-to-seed spread
		add := 8 + 2*float64(s%3) - 2  // memory's gain: 6, 8, 10, …
		pool = append(pool, tr([]float64{base, base + add, base + add}, []float64{base, base, base}))
		held = append(held, tr([]float64{base, base, base}, []float64{base, base, base}))
		diffs = append(diffs, add)
	}
	// from scratch: mean and sample sd of the differences
	var m, ss float64
	for _, d := range diffs {
		m += d
	}
	m /= float64(len(diffs))
	for _, d := range diffs {
		ss += (d - m) * (d - m)
	}
	se := math.Sqrt(ss/float64(len(diffs)-1)) / math.Sqrt(float64(len(diffs)))
	r, text := runGate(t, pool, held, RulePaired)
	if r.Verdict != GatePass || !strings.HasSuffix(text, "gate: PASS\n") {
		t.Fatalf("paired: want PASS:\n%s", text)
	}
	if math.Abs(r.Pool.D-m) > 1e-9 || math.Abs(r.Pool.SE-se) > 1e-9 {
		t.Errorf("paired: D %.4f SE %.4f, from scratch %.4f %.4f", r.Pool.D, r.Pool.SE, m, se)
	}
	if i2, i10 := strings.Index(text, "| training pool | 2 |"), strings.Index(text, "| training pool | 10 |"); i2 < 0 || i10 < i2 {
		t.Errorf("seeds not in numeric order:\n%s", text)
	}
	if r, _ := runGate(t, pool, held, RuleUnpaired); r.PoolOK {
		t.Errorf("unpaired: the control's spread should hide the gain: %+v", r.Pool)
	}
	// noisy differences: +22, −18, … around +2: fails
	var noisy [][2][]float64
	for s := 0; s < 10; s++ {
		add := 22.0
		if s%2 == 1 {
			add = -18
		}
		noisy = append(noisy, tr([]float64{30, 30 + add, 30 + add}, []float64{30, 30, 30}))
	}
	if r, _ := runGate(t, noisy, held, RulePaired); r.Verdict != GateFail || r.PoolOK {
		t.Errorf("paired, noisy: want FAIL on the pool test: %+v", r)
	}
	// held-out memory well below the control at every seed: fails (2)
	var bad [][2][]float64
	for s := 0; s < 10; s++ {
		bad = append(bad, tr([]float64{50, 30 + float64(s), 30}, []float64{50, 50, 50}))
	}
	if r, text := runGate(t, pool, bad, RulePaired); r.Verdict != GateFail || r.HeldOK {
		t.Errorf("paired, held-out below: want FAIL:\n%s", text)
	}
	// nine seeds never pass the paired rule
	if r, text := runGate(t, pool[:9], held[:9], RulePaired); r.Verdict != GateFail || !strings.Contains(text, "9 seeds (the paired rule needs 10)") {
		t.Errorf("paired, 9 seeds: want FAIL:\n%s", text)
	}
}
