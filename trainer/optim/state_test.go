package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/lora"
)

func testAdapter(seed uint64) *lora.Adapter {
	rng := rand.New(rand.NewPCG(seed, 1))
	a := &lora.Adapter{Arch: "qwen2", Alpha: 8, Meta: map[string]string{"general.name": "t"}}
	for _, spec := range []struct {
		name         string
		in, out, rnk int
	}{{"blk.0.attn_q.weight", 16, 16, 4}, {"blk.0.ffn_down.weight", 24, 16, 4}, {"blk.1.attn_v.weight", 16, 8, 4}} {
		p := &lora.Pair{Base: spec.name, In: spec.in, Out: spec.out, Rank: spec.rnk,
			A: make([]float32, spec.in*spec.rnk), B: make([]float32, spec.out*spec.rnk)}
		for i := range p.A {
			p.A[i] = float32(rng.NormFloat64() * 0.1)
		}
		a.Pairs = append(a.Pairs, p)
	}
	a.Sort()
	return a
}

func newTestState(t *testing.T) *State {
	t.Helper()
	a := testAdapter(1)
	opt, err := NewAdamW(AdamWConfig{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.01}, sizesOf(AdapterParams(a)))
	if err != nil {
		t.Fatal(err)
	}
	return &State{Adapter: a, Opt: opt, RNG: rand.NewPCG(42, 43),
		Schedule: Schedule{Kind: ScheduleCosine, BaseLR: 1e-2, MinLR: 1e-3, Warmup: 2, Total: 10},
		Meta:     map[string]string{"run": "resume-test"}}
}

func sizesOf(p [][]float32) []int {
	s := make([]int, len(p))
	for i := range p {
		s[i] = len(p[i])
	}
	return s
}

// simStep is a training step with a synthetic noisy quadratic loss
// ½‖θ − 1‖² whose gradient noise comes from the state's RNG, so that
// everything the state holds (weights, moments, step, schedule, RNG)
// influences the result.
func simStep(t *testing.T, s *State) {
	t.Helper()
	rng := rand.New(s.RNG)
	params := AdapterParams(s.Adapter)
	grads := make([][]float32, len(params))
	for i, p := range params {
		grads[i] = make([]float32, len(p))
		for j, x := range p {
			grads[i][j] = x - 1 + float32(rng.NormFloat64())
		}
	}
	if _, _, err := ClipGradNorm(grads, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Opt.Step(params, grads, s.Schedule.LR(s.Step)); err != nil {
		t.Fatal(err)
	}
	s.Step++
}

func TestResumeBitExact(t *testing.T) {
	const n = 8
	straight := newTestState(t)
	for i := 0; i < n; i++ {
		simStep(t, straight)
	}
	half := newTestState(t)
	for i := 0; i < n/2; i++ {
		simStep(t, half)
	}
	path := filepath.Join(t.TempDir(), "state.gguf")
	if err := Save(path, half); err != nil {
		t.Fatal(err)
	}
	half = nil
	resumed, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Step != n/2 || resumed.Opt.Steps != n/2 || resumed.Meta["run"] != "resume-test" {
		t.Fatalf("loaded step %d, adam steps %d, meta %v", resumed.Step, resumed.Opt.Steps, resumed.Meta)
	}
	if resumed.Adapter.Meta["general.name"] != "t" || len(resumed.Adapter.Meta) != 1 {
		t.Errorf("adapter metadata %v", resumed.Adapter.Meta)
	}
	for i := 0; i < n/2; i++ {
		simStep(t, resumed)
	}
	a, b := AdapterParams(straight.Adapter), AdapterParams(resumed.Adapter)
	changed := false
	initial := AdapterParams(testAdapter(1))
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				t.Fatalf("tensor %d element %d: straight %v, resumed %v", i, j, a[i][j], b[i][j])
			}
			if math.Float32bits(straight.Opt.M[i][j]) != math.Float32bits(resumed.Opt.M[i][j]) ||
				math.Float32bits(straight.Opt.V[i][j]) != math.Float32bits(resumed.Opt.V[i][j]) {
				t.Fatalf("moments of tensor %d element %d differ", i, j)
			}
			changed = changed || a[i][j] != initial[i][j]
		}
	}
	if !changed {
		t.Fatal("training did not change the parameters; the comparison proves nothing")
	}
	if straight.RNG.Uint64() != resumed.RNG.Uint64() {
		t.Error("RNG streams differ after resume")
	}
}

func TestResumeWithoutRNGStateDiverges(t *testing.T) {
	// Guard for the test above: losing any part of the state must show.
	s := newTestState(t)
	simStep(t, s)
	path := filepath.Join(t.TempDir(), "s.gguf")
	if err := Save(path, s); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r.RNG = rand.NewPCG(42, 43) // reset instead of restored
	simStep(t, s)
	simStep(t, r)
	if AdapterParams(s.Adapter)[0][0] == AdapterParams(r.Adapter)[0][0] {
		t.Error("a reset RNG gave the same update; the RNG state is not exercised")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	// A plain adapter is not a state file.
	ap := filepath.Join(dir, "adapter.gguf")
	if err := testAdapter(1).Write(ap, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ap); !errors.Is(err, ErrState) {
		t.Errorf("adapter loaded as state: %v", err)
	}
	// A state file is not an adapter.
	sp := filepath.Join(dir, "state.gguf")
	if err := Save(sp, newTestState(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := lora.Read(sp); !errors.Is(err, lora.ErrNotAdapter) {
		t.Errorf("state read as adapter: %v", err)
	}
	// Corrupt and missing files.
	data, _ := os.ReadFile(sp)
	bad := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(bad, data[:len(data)/2], 0o644)
	if _, err := Load(bad); err == nil {
		t.Error("truncated state accepted")
	}
	if _, err := Load(filepath.Join(dir, "nope.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing state: %v", err)
	}
	// Inconsistent state is refused on save.
	s := newTestState(t)
	s.Opt.M = s.Opt.M[1:]
	if err := Save(filepath.Join(dir, "x.gguf"), s); !errors.Is(err, ErrState) {
		t.Errorf("inconsistent state saved: %v", err)
	}
	// Save is atomic: a failed save leaves the old file intact.
	if err := Save(sp, s); err == nil {
		t.Fatal("inconsistent state saved")
	}
	if _, err := Load(sp); err != nil {
		t.Errorf("old state damaged by a failed save: %v", err)
	}
}
