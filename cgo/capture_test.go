package cgo

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCaptureTrainStep: a training step through Capture (Coef) adds the
// gradient of Σ c_j·logp_j + e_j·H_j, checked against central differences
// of that sum computed from Capture's own forward; node by node it adds the
// same gradients as in one go and reports the backward nodes as such, the
// gradient accumulators among them.
func TestCaptureTrainStep(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}, Options{Threads: 1})
	seqs := [][]int32{{5, 17, 200, 3, 99, 41}, {1, 2, 3, 4}}
	rows := 5 + 3
	rng := rand.New(rand.NewPCG(11, 11))
	c, e := make([]float32, rows), make([]float32, rows)
	for j := range c {
		c[j], e[j] = float32(2*rng.Float64()-1), float32(0.3*(2*rng.Float64()-1))
	}
	coef := func(logp, ent, cLogp, cEnt []float32) error {
		copy(cLogp, c)
		copy(cEnt, e)
		return nil
	}
	surrogate := func() float64 {
		out, err := m.Capture(seqs, CaptureConfig{})
		if err != nil {
			t.Fatal(err)
		}
		s := 0.0
		for j := range c {
			s += float64(c[j])*float64(out.Logp[j]) + float64(e[j])*float64(out.Ent[j])
		}
		return s
	}
	mustZero(t, m)
	if _, err := m.Capture(seqs, CaptureConfig{Coef: coef}); err != nil {
		t.Fatal(err)
	}
	whole := mustGrads(t, m)
	mustZero(t, m)
	nodes, err := m.Capture(seqs, CaptureConfig{Coef: coef, Nodes: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range mustGrads(t, m) {
		if !slices.Equal(g, whole[i]) {
			t.Fatalf("%s: node by node and in one go differ", m.Params()[i].Name)
		}
	}
	nBwd, nAcc := 0, 0
	for _, n := range nodes.Nodes {
		if n.Backward {
			nBwd++
			if slices.ContainsFunc(n.Srcs, func(s string) bool { return len(s) > 9 && s[:9] == "grad_acc." }) {
				nAcc++
			}
		}
	}
	if nBwd == 0 || nAcc != len(m.Params()) {
		t.Fatalf("%d backward nodes, %d accumulator updates for %d parameters", nBwd, nAcc, len(m.Params()))
	}

	params := mustParams(t, m)
	const eps = 1e-2
	for pi, info := range m.Params() {
		if pi%3 != 0 {
			continue
		}
		g := whole[pi]
		i := 0
		for k := range g {
			if math.Abs(float64(g[k])) > math.Abs(float64(g[i])) {
				i = k
			}
		}
		orig := params[pi][i]
		params[pi][i] = orig + eps
		if err := m.WriteParams(params); err != nil {
			t.Fatal(err)
		}
		sp := surrogate()
		params[pi][i] = orig - eps
		if err := m.WriteParams(params); err != nil {
			t.Fatal(err)
		}
		sm := surrogate()
		params[pi][i] = orig
		fd := (sp - sm) / (2 * eps)
		if rel := math.Abs(fd-float64(g[i])) / math.Max(math.Abs(float64(g[i])), 1e-12); rel > 1e-2 {
			t.Errorf("%s[%d]: analytic %.6g, finite difference %.6g, rel err %.3g", info.Name, i, g[i], fd, rel)
		}
	}
	if err := m.WriteParams(params); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureLimits: MaxBytes keeps values for the first nodes only (every
// node still listed); bad input is refused with the documented errors, and a
// failing Coef aborts the step without touching the gradients.
func TestCaptureLimits(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Seed: 1}, Options{Threads: 1})
	seqs := [][]int32{{5, 17, 200, 3}}
	full, err := m.Capture(seqs, CaptureConfig{Nodes: true})
	if err != nil {
		t.Fatal(err)
	}
	first := slices.IndexFunc(full.Nodes, func(n NodeOutput) bool { return n.Data != nil })
	limited, err := m.Capture(seqs, CaptureConfig{Nodes: true, MaxBytes: int64(4 * len(full.Nodes[first].Data))})
	if err != nil {
		t.Fatal(err)
	}
	if len(limited.Nodes) != len(full.Nodes) || limited.Nodes[first].Data == nil {
		t.Fatalf("%d nodes (want %d), first node's values %v", len(limited.Nodes), len(full.Nodes), limited.Nodes[first].Data != nil)
	}
	for _, n := range limited.Nodes[first+1:] {
		if n.Data != nil {
			t.Fatalf("node %d has values beyond MaxBytes", n.Index)
		}
	}
	if again, err := m.Capture(seqs, CaptureConfig{}); err != nil || again.Nodes != nil || !slices.Equal(again.Logp, full.Logp) {
		t.Fatalf("capture left on: %v, %d nodes", err, len(again.Nodes))
	}

	for name, tc := range map[string]struct {
		seqs [][]int32
		cfg  CaptureConfig
		want error
	}{
		"empty":     {nil, CaptureConfig{}, ErrShape},
		"short":     {[][]int32{{5}}, CaptureConfig{}, ErrShape},
		"vocab":     {[][]int32{{5, 1 << 20}}, CaptureConfig{}, ErrShape},
		"max-bytes": {seqs, CaptureConfig{MaxBytes: -1}, ErrConfig},
	} {
		if _, err := m.Capture(tc.seqs, tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	mustZero(t, m)
	boom := errors.New("boom")
	_, err = m.Capture(seqs, CaptureConfig{Nodes: true, Coef: func(_, _, cl, _ []float32) error {
		cl[0] = 1
		return boom
	}})
	if !errors.Is(err, boom) {
		t.Fatalf("failing Coef: %v", err)
	}
	for _, g := range mustGrads(t, m) {
		if slices.ContainsFunc(g, func(x float32) bool { return x != 0 }) {
			t.Fatal("an aborted step changed the gradients")
		}
	}
}
