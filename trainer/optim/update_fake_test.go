package optim

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/llama"
)

// fakePolicy is a pure-Go Policy with two rank-1 LoRA pairs on 3→2 weights.
// Each trained token t adds lossScale·(−A_t)·(θ + token/10) to the gradient
// of every parameter, so the accumulated gradient depends on how loss
// scales and micro-batches are combined (the real gradient is checked
// against llama.cpp in update_test.go).
type fakePolicy struct {
	infos     []cgo.ParamInfo
	params    [][]float32
	grads     [][]float32
	calls     int
	scales    []float32
	failWrite bool
}

func newFakePolicy() *fakePolicy {
	f := &fakePolicy{infos: []cgo.ParamInfo{
		// Canonical order (lora.Less): q before k, although k < q by name.
		{Name: "blk.0.attn_q.weight.lora_a", Shape: [2]int{3, 1}, Base: "blk.0.attn_q.weight", Target: "q"},
		{Name: "blk.0.attn_q.weight.lora_b", Shape: [2]int{1, 2}, Base: "blk.0.attn_q.weight", Target: "q", IsB: true},
		{Name: "blk.0.attn_k.weight.lora_a", Shape: [2]int{3, 1}, Base: "blk.0.attn_k.weight", Target: "k"},
		{Name: "blk.0.attn_k.weight.lora_b", Shape: [2]int{1, 2}, Base: "blk.0.attn_k.weight", Target: "k", IsB: true},
	}}
	f.params = [][]float32{{0.1, -0.2, 0.3}, {0, 0}, {0.5, 0.5, -0.5}, {0, 0}}
	f.ZeroGrads()
	return f
}

func (f *fakePolicy) Info() cgo.ModelInfo {
	return cgo.ModelInfo{ModelInfo: llama.ModelInfo{Arch: "qwen2"}}
}
func (f *fakePolicy) LoRA() cgo.LoRAConfig             { return cgo.LoRAConfig{Rank: 1, Alpha: 2} }
func (f *fakePolicy) Params() []cgo.ParamInfo          { return f.infos }
func (f *fakePolicy) ReadParams() ([][]float32, error) { return clone2(f.params), nil }
func (f *fakePolicy) Grads() ([][]float32, error)      { return clone2(f.grads), nil }
func (f *fakePolicy) ZeroGrads() error {
	f.grads = make([][]float32, len(f.params))
	for i := range f.params {
		f.grads[i] = make([]float32, len(f.params[i]))
	}
	return nil
}
func (f *fakePolicy) WriteParams(p [][]float32) error {
	if f.failWrite {
		return errors.New("fake write failure")
	}
	f.params = clone2(p)
	return nil
}

func (f *fakePolicy) ForwardBackward(batch []cgo.Sequence, obj cgo.Objective, scale float32) (cgo.Stats, error) {
	f.calls++
	f.scales = append(f.scales, scale)
	var st cgo.Stats
	for _, s := range batch {
		n := 0
		for t, tr := range s.Trained {
			if !tr {
				continue
			}
			n++
			for i := range f.grads {
				for j := range f.grads[i] {
					f.grads[i][j] += scale * -s.Advantage[t] * (f.params[i][j] + float32(s.Tokens[t])/10)
				}
			}
			st.Loss += float64(scale * -s.Advantage[t])
		}
		if n > 0 {
			st.Sequences++
		}
		st.Tokens += n
	}
	st.ClipFrac = 0.5
	st.Entropy = 1
	return st, nil
}

type recordSink struct{ got map[string][]float32 }

func (r *recordSink) SetTensor(name string, data []float32) error {
	r.got[name] = append([]float32(nil), data...)
	return nil
}

func fakeBatch() []cgo.Sequence {
	mk := func(toks []int32, trained []bool, adv float32) cgo.Sequence {
		s := cgo.Sequence{Tokens: toks, Trained: trained}
		s.OldLogp = make([]float32, len(toks))
		s.Advantage = make([]float32, len(toks))
		for i := range toks {
			s.Advantage[i] = adv
		}
		return s
	}
	return []cgo.Sequence{
		mk([]int32{1, 2, 3}, []bool{false, true, true}, 1),
		mk([]int32{4, 5, 6, 7}, []bool{false, false, true, true}, -0.5),
		mk([]int32{8, 9}, []bool{false, true}, 2),
	}
}

func fakeConfig(micro int) Config {
	return Config{
		AdamW:       DefaultAdamW(),
		Schedule:    Schedule{Kind: ScheduleConstant, BaseLR: 0.01},
		MaxGradNorm: 1,
		Objective:   cgo.DefaultObjective(),
		MicroBatch:  micro,
	}
}

func TestUpdaterAccumulationMatchesFullBatch(t *testing.T) {
	full, micro := newFakePolicy(), newFakePolicy()
	uf, err := NewUpdater(full, fakeConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	um, _ := NewUpdater(micro, fakeConfig(1))
	sink := &recordSink{got: map[string][]float32{}}
	um.Sinks = []TensorSink{sink}
	mf, err := uf.Update(fakeBatch())
	if err != nil {
		t.Fatal(err)
	}
	mm, err := um.Update(fakeBatch())
	if err != nil {
		t.Fatal(err)
	}
	if full.calls != 1 || micro.calls != 3 || mm.MicroBatches != 3 {
		t.Fatalf("ForwardBackward calls: full %d, micro %d", full.calls, micro.calls)
	}
	// 5 trained tokens in the mini-batch: every call gets scale 1/5.
	for _, s := range append(full.scales, micro.scales...) {
		if s != float32(1.0/5) {
			t.Fatalf("loss scale %v, want 1/5 (token-mean over the whole mini-batch)", s)
		}
	}
	if mf.Tokens != 5 || mm.Tokens != 5 || mm.Sequences != 3 {
		t.Errorf("tokens %d/%d sequences %d", mf.Tokens, mm.Tokens, mm.Sequences)
	}
	if math.Abs(mf.Loss-mm.Loss) > 1e-6 || math.Abs(mf.GradNorm-mm.GradNorm) > 1e-6 {
		t.Errorf("loss %v vs %v, grad norm %v vs %v", mf.Loss, mm.Loss, mf.GradNorm, mm.GradNorm)
	}
	if mm.ClipFrac != 0.5 || mm.Entropy != 1 || mm.LR != 0.01 || mm.Step != 0 {
		t.Errorf("metrics %+v", mm)
	}
	changed := false
	for i := range full.params {
		for j := range full.params[i] {
			if d := math.Abs(float64(full.params[i][j] - micro.params[i][j])); d > 1e-6 {
				t.Fatalf("param %d/%d: full batch %v, micro-batches %v", i, j, full.params[i][j], micro.params[i][j])
			}
			changed = changed || full.params[i][j] != newFakePolicy().params[i][j]
		}
	}
	if !changed {
		t.Fatal("update did not change the parameters")
	}
	// The sink received every tensor with the new values.
	for i, info := range micro.infos {
		if got := sink.got[info.Name]; !bitsEq(got, micro.params[i]) {
			t.Errorf("sink has %v for %s, policy %v", got, info.Name, micro.params[i])
		}
	}
	if um.Step != 1 || um.Opt.Steps != 1 {
		t.Errorf("step %d, adam steps %d", um.Step, um.Opt.Steps)
	}
}

func TestUpdaterSkipsEmptyAndRollsBack(t *testing.T) {
	p := newFakePolicy()
	u, _ := NewUpdater(p, fakeConfig(0))
	m, err := u.Update([]cgo.Sequence{{Tokens: []int32{1, 2}, Trained: []bool{false, false}, OldLogp: []float32{0, 0}, Advantage: []float32{0, 0}}})
	if err != nil || !m.Skipped || p.calls != 0 || u.Step != 0 {
		t.Fatalf("empty batch: %+v %v calls %d", m, err, p.calls)
	}
	p.failWrite = true
	before := clone2(u.Params())
	if _, err := u.Update(fakeBatch()); !errors.Is(err, ErrUpdate) {
		t.Fatalf("write failure: %v", err)
	}
	if u.Step != 0 || u.Opt.Steps != 0 || !bitsEq(u.Params()[0], before[0]) || u.Opt.M[0][0] != 0 {
		t.Errorf("failed update changed the updater state")
	}
}

func TestUpdaterStateRoundTrip(t *testing.T) {
	// The policy's order (q before k, not name order) is the state's
	// order: Save/Restore keep moments aligned with no reordering.
	p := newFakePolicy()
	u, _ := NewUpdater(p, fakeConfig(0))
	for i := 0; i < 2; i++ {
		if _, err := u.Update(fakeBatch()); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "s.gguf")
	if err := u.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	q := newFakePolicy()
	v, _ := NewUpdater(q, fakeConfig(0))
	if err := v.Restore(st); err != nil {
		t.Fatal(err)
	}
	for i := range u.Params() {
		if !bitsEq(u.Params()[i], v.Params()[i]) || !bitsEq(q.params[i], p.params[i]) ||
			!bitsEq(u.Opt.M[i], v.Opt.M[i]) || !bitsEq(u.Opt.V[i], v.Opt.V[i]) {
			t.Fatalf("tensor %d differs after restore", i)
		}
	}
	if v.Step != 2 || v.Opt.Steps != 2 {
		t.Errorf("restored step %d/%d", v.Step, v.Opt.Steps)
	}
	// Alpha mismatch is refused.
	st.Adapter.Alpha = 3
	if err := v.Restore(st); err == nil {
		t.Error("state with another alpha restored")
	}
}

func bitsEq(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestUpdaterSeqMeanScale(t *testing.T) {
	p := newFakePolicy()
	cfg := fakeConfig(2)
	cfg.Objective.Aggregation = cgo.AggSeqMeanTokenMean
	u, err := NewUpdater(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Update(fakeBatch()); err != nil {
		t.Fatal(err)
	}
	// 3 sequences with trained tokens: scale 1/3 in both micro-batches.
	if len(p.scales) != 2 || p.scales[0] != float32(1.0/3) || p.scales[1] != float32(1.0/3) {
		t.Errorf("scales %v, want [1/3 1/3]", p.scales)
	}
}

// TestUpdaterUntrainedMicroBatch: a micro-batch whose sequence has no
// trained token (low-probability masking, applied by the caller, cleared
// them) is not run, and the loss scale counts the others only.
func TestUpdaterUntrainedMicroBatch(t *testing.T) {
	p := newFakePolicy()
	u, _ := NewUpdater(p, fakeConfig(1))
	b := fakeBatch()
	clear(b[1].Trained)
	m, err := u.Update(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.calls != 2 || m.Tokens != 3 || m.Sequences != 2 || p.scales[0] != float32(1.0/3) {
		t.Errorf("calls %d tokens %d sequences %d scales %v", p.calls, m.Tokens, m.Sequences, p.scales)
	}
}
