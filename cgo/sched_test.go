package cgo

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// Every graph runs through ggml_backend_sched (the path a GPU uses, with the
// CPU as the fallback backend). These tests cover what that path adds: the
// coefficients are computed by Go from inside the scheduler's eval callback,
// between the forward and the backward nodes of one graph compute.

// TestSchedulerTrainStepSeesForward: the log-probs and entropies handed to the
// objective mid-compute are the complete forward outputs: a training step's
// statistics (but its compute buffer) equal, bit for bit, those of a
// forward-only Evaluate (on the CPU
// both compute the same nodes in the same order), and the graph is a single
// split on the CPU.
func TestSchedulerTrainStepSeesForward(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 5, RandomB: true}, Options{Threads: 1})
	rng := rand.New(rand.NewPCG(11, 12))
	batch := fdBatch(t, m, rng)
	obj := DefaultObjective()
	ev, err := m.Evaluate(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := m.ForwardBackward(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	// the compute buffers differ by design (the training graph holds the
	// backward's tensors too); every other statistic must be identical
	if !(tr.ComputeBytes > ev.ComputeBytes && ev.ComputeBytes > 0) {
		t.Fatalf("compute buffers: training %d, forward %d", tr.ComputeBytes, ev.ComputeBytes)
	}
	ev.ComputeBytes, tr.ComputeBytes = 0, 0
	if ev != tr {
		t.Fatalf("stats differ:\nEvaluate        %+v\nForwardBackward %+v", ev, tr)
	}
	if s := m.MemoryBytes().Splits; s != 1 {
		t.Errorf("CPU graph has %d scheduler splits, want 1", s)
	}
}

// TestSchedulerAbortKeepsGrads: when the coefficient function fails (an
// error, a panic, or non-finite forward outputs) the backward nodes still
// run inside the scheduler, so the step must restore the accumulators: they
// stay bit for bit as before, the error reaches the caller, and the next
// step accumulates normally.
func TestSchedulerAbortKeepsGrads(t *testing.T) {
	M := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 6, RandomB: true}, Options{Threads: 1})
	rng := rand.New(rand.NewPCG(13, 14))
	batch := fdBatch(t, M, rng)
	obj := DefaultObjective()
	if _, err := M.ForwardBackward(batch, obj, 0.5); err != nil {
		t.Fatal(err)
	}
	g1 := mustGrads(t, M)
	if nonzero := countNonzero(g1); nonzero == 0 {
		t.Fatal("first step left every gradient at 0")
	}
	seqs := [][]int32{batch[0].Tokens, batch[1].Tokens}
	errBoom := errors.New("boom")
	cases := []struct {
		name string
		fn   coefFunc
		want error
	}{
		{"error", func(lp, en, cl, ce []float32) error {
			for j := range cl {
				cl[j], ce[j] = 1, 1 // written, then abandoned
			}
			return errBoom
		}, errBoom},
		{"panic", func(lp, en, cl, ce []float32) error {
			for j := range cl {
				cl[j] = 1
			}
			panic("objective bug")
		}, ErrBackend},
	}
	for _, c := range cases {
		m, err := M.lock()
		if err != nil {
			t.Fatal(err)
		}
		rows, spans := make([][]int, len(seqs)), make([]span, len(seqs))
		for i := range seqs {
			rows[i], spans[i] = []int{1, 2, 3}, span{i, 0, 3}
		}
		p, err := m.packSpans(seqs, rows, spans)
		if err == nil {
			_, _, err = m.forward(p, c.fn)
		}
		m.mu.Unlock()
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.want)
		}
		if g := mustGrads(t, M); !equalParams(g, g1) {
			t.Fatalf("%s: the aborted step changed the gradient accumulators", c.name)
		}
	}
	// non-finite forward outputs (through the public API): LoRA weights so
	// large that the logits overflow
	big := mustParams(t, M)
	for i := range big {
		for j := range big[i] {
			big[i][j] = 3e18
		}
	}
	saved := mustParams(t, M)
	if err := M.WriteParams(big); err != nil {
		t.Fatal(err)
	}
	if _, err := M.ForwardBackward(batch, obj, 0.5); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("overflowing forward: got %v, want ErrNonFinite", err)
	}
	if g := mustGrads(t, M); !equalParams(g, g1) {
		t.Fatal("the non-finite step changed the gradient accumulators")
	}
	if err := M.WriteParams(saved); err != nil {
		t.Fatal(err)
	}
	// the scheduler is usable after the aborts: same step again gives 2×
	if _, err := M.ForwardBackward(batch, obj, 0.5); err != nil {
		t.Fatal(err)
	}
	g2 := mustGrads(t, M)
	for i := range g1 {
		for j := range g1[i] {
			if g2[i][j] != 2*g1[i][j] {
				t.Fatalf("param %d[%d]: after a repeat step got %v, want 2×%v", i, j, g2[i][j], g1[i][j])
			}
		}
	}
}

func countNonzero(v [][]float32) int {
	n := 0
	for _, x := range v {
		for _, y := range x {
			if y != 0 {
				n++
			}
		}
	}
	return n
}

func equalParams(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}
