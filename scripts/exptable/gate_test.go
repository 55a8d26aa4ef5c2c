package main

import (
	"errors"
	"fmt"
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
func TestGate(t *testing.T) {
	run := func(pool, held [][2][]float64) (gateResult, string) {
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
		r := writeGate(&b, g)
		return r, b.String()
	}
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
