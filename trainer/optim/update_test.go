package optim

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

func testUpdateConfig() Config {
	return Config{
		AdamW:       DefaultAdamW(),
		Schedule:    Schedule{Kind: ScheduleCosine, BaseLR: 2e-2, MinLR: 2e-3, Warmup: 1, Total: 8},
		MaxGradNorm: 1,
		Objective:   cgo.DefaultObjective(),
		MicroBatch:  1,
	}
}

// rlBatch builds two on-policy sequences (old log-probs from the policy
// itself) training the response tokens with the given advantage.
func rlBatch(t *testing.T, pol *cgo.Model, prompt, resp []int32, adv float32) []cgo.Sequence {
	t.Helper()
	toks := append(append([]int32(nil), prompt...), resp...)
	old, err := pol.LogProbs(toks)
	if err != nil {
		t.Fatal(err)
	}
	s := cgo.Sequence{Tokens: toks, Trained: make([]bool, len(toks)), OldLogp: old, Advantage: make([]float32, len(toks))}
	for i := len(prompt); i < len(toks); i++ {
		s.Trained[i], s.Advantage[i] = true, adv
	}
	return []cgo.Sequence{s, s}
}

func sum32(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

// TestUpdateRaisesLogProbInLlama: repeated updates with a positive advantage
// raise the response's log-prob as llama.cpp sees it after the weights are
// pushed into its loaded adapter (no reload, no merge), and llama.cpp's
// log-probs agree with the training graph's for the same weights.
func TestUpdateRaisesLogProbInLlama(t *testing.T) {
	model := testutil.TinyModelFile(t)
	pol, err := cgo.Load(model, cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 1}, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	u, err := NewUpdater(pol, testUpdateConfig())
	if err != nil {
		t.Fatal(err)
	}
	a, err := u.Adapter()
	if err != nil {
		t.Fatal(err)
	}
	adapterPath := filepath.Join(t.TempDir(), "adapter.gguf")
	if err := a.Write(adapterPath, gguf.TypeF32); err != nil {
		t.Fatal(err)
	}

	lm, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	la, err := lm.LoadAdapter(adapterPath)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	ctx, err := llama.NewContext(lm, llama.ContextParams{NCtx: 256, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if err := ctx.SetAdapter(la, 1); err != nil {
		t.Fatal(err)
	}
	u.Sinks = []TensorSink{la}

	prompt, _ := lm.Tokenize("Question: which tool reads the thermometer? Answer:", false, false)
	resp, _ := lm.Tokenize(" focus on the thermometer", false, false)
	score := func() []float32 {
		s, err := ctx.Score(context.Background(), prompt, resp)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := sum32(score())
	for i := 0; i < 6; i++ {
		m, err := u.Update(rlBatch(t, pol, prompt, resp, 1))
		if err != nil {
			t.Fatal(err)
		}
		if m.Skipped || m.Tokens != 2*len(resp) || m.MicroBatches != 2 || m.GradNorm <= 0 || m.Step != int64(i) {
			t.Fatalf("update %d metrics %+v", i, m)
		}
		t.Logf("update %d: logp mean %.4f loss %.4f clip %.3f kl %.5f gradnorm %.4f lr %.4g", i, m.LogpMean, m.Loss, m.ClipFrac, m.ApproxKL, m.GradNorm, m.LR)
		if i == 0 && (m.ClipFrac != 0 || math.Abs(m.ApproxKL) > 1e-6) {
			t.Errorf("on-policy first update: clip fraction %v, approx KL %v, want 0", m.ClipFrac, m.ApproxKL)
		}
	}
	afterLlama := score()
	after := sum32(afterLlama)
	t.Logf("response log-prob in llama.cpp: before %.4f, after 6 updates %.4f", before, after)
	if after < before+5 {
		t.Fatalf("log-prob of the rewarded response went from %.4f to %.4f; want an increase ≥ 5", before, after)
	}
	// Same weights, two engines: llama.cpp's Score vs the graph's LogProbs.
	toks := append(append([]int32(nil), prompt...), resp...)
	lp, err := pol.LogProbs(toks)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(lp[len(prompt):], afterLlama); d > 1e-4 {
		t.Errorf("pushed weights: llama.cpp and the training graph disagree by %g on log-probs", d)
	}
	// The adapter llama.cpp now holds is the updater's.
	for i, info := range pol.Params() {
		got, err := la.Tensor(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bitsEq(got, u.Params()[i]) {
			t.Fatalf("llama.cpp's %s differs from the pushed values", info.Name)
		}
	}
	// Negative advantage pushes the other way.
	lower := after
	for i := 0; i < 3; i++ {
		if _, err := u.Update(rlBatch(t, pol, prompt, resp, -1)); err != nil {
			t.Fatal(err)
		}
	}
	if neg := sum32(score()); neg >= lower {
		t.Errorf("negative advantage did not lower the log-prob: %.4f → %.4f", lower, neg)
	}
}

// TestResumeBitExactWithModel: N updates straight equal N/2 updates, save,
// load into a fresh model and updater, N/2 updates — bit for bit on CPU.
func TestResumeBitExactWithModel(t *testing.T) {
	model := testutil.TinyModelFile(t)
	lcfg := cgo.LoRAConfig{Rank: 2, Alpha: 4, Seed: 7, Targets: []string{"q", "v", "down"}}
	prompt := []int32{10, 20, 30, 40, 50, 60}
	resp := []int32{70, 80, 90}
	run := func(pol *cgo.Model, u *Updater, n int) {
		for i := 0; i < n; i++ {
			// The advantage sign alternates and depends on the RNG, which
			// the state must carry too.
			adv := float32(1)
			if u.RNG.Uint64()%2 == 0 {
				adv = -0.5
			}
			if _, err := u.Update(rlBatch(t, pol, prompt, resp, adv)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const n = 6
	p1, err := cgo.Load(model, lcfg, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	u1, _ := NewUpdater(p1, testUpdateConfig())
	u1.RNG = pcg(3)
	run(p1, u1, n)

	p2, _ := cgo.Load(model, lcfg, testutil.CgoOptions)
	u2, _ := NewUpdater(p2, testUpdateConfig())
	u2.RNG = pcg(3)
	run(p2, u2, n/2)
	path := filepath.Join(t.TempDir(), "state.gguf")
	if err := u2.Save(path); err != nil {
		t.Fatal(err)
	}
	p2.Close()

	// Fresh objects: a model loaded with another seed, so nothing but the
	// state file can make it equal.
	lcfg3 := lcfg
	lcfg3.Seed = 99
	p3, err := cgo.Load(model, lcfg3, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	u3, _ := NewUpdater(p3, testUpdateConfig())
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := u3.Restore(st); err != nil {
		t.Fatal(err)
	}
	run(p3, u3, n-n/2)

	a, b := mustRead(t, p1), mustRead(t, p3)
	s1, err := u1.State()
	if err != nil {
		t.Fatal(err)
	}
	s3, err := u3.State()
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !bitsEq(a[i], b[i]) {
			t.Fatalf("%s differs between straight and resumed training", p1.Params()[i].Name)
		}
		if !bitsEq(s1.Opt.M[i], s3.Opt.M[i]) || !bitsEq(s1.Opt.V[i], s3.Opt.V[i]) {
			t.Fatalf("moments of %s differ", p1.Params()[i].Name)
		}
	}
	if u3.Step != n || u3.Opt.Steps != n {
		t.Errorf("resumed step %d / %d", u3.Step, u3.Opt.Steps)
	}
	init, _ := cgo.Load(model, lcfg, testutil.CgoOptions)
	defer init.Close()
	if bitsEq(mustRead(t, init)[0], a[0]) && bitsEq(mustRead(t, init)[1], a[1]) {
		t.Fatal("training did not move the parameters; the comparison proves nothing")
	}
}

// TestLoraInitMatchesPolicyInit: `lora init --seed S` and a policy loaded
// with seed S start from the same adapter, and an adapter file loads into
// the policy by name.
func TestLoraInitMatchesPolicyInit(t *testing.T) {
	model := testutil.TinyModelFile(t)
	base, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	targets := []string{"q", "v", "down", "gate"}
	fileA, err := lora.Init(base, lora.InitConfig{Rank: 3, Alpha: 6, Targets: targets, Seed: 5, RandomB: true})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := cgo.Load(model, cgo.LoRAConfig{Rank: 3, Alpha: 6, Targets: targets, Seed: 5, RandomB: true}, testutil.CgoOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	polA, err := pol.ReadAdapter()
	if err != nil {
		t.Fatal(err)
	}
	if len(polA.Pairs) != len(fileA.Pairs) {
		t.Fatalf("%d pairs vs %d", len(polA.Pairs), len(fileA.Pairs))
	}
	for i, p := range fileA.Pairs {
		q := polA.Pairs[i]
		if p.Base != q.Base || !bitsEq(p.A, q.A) || !bitsEq(p.B, q.B) {
			t.Fatalf("pair %s: lora init and cgo.Load disagree", p.Base)
		}
	}
	// Loading an adapter into a policy with another seed makes them equal.
	other, _ := cgo.Load(model, cgo.LoRAConfig{Rank: 3, Alpha: 6, Targets: targets, Seed: 77}, testutil.CgoOptions)
	defer other.Close()
	u, _ := NewUpdater(other, testUpdateConfig())
	if err := u.LoadAdapter(fileA); err != nil {
		t.Fatal(err)
	}
	for i, v := range mustRead(t, other) {
		if !bitsEq(v, mustRead(t, pol)[i]) {
			t.Fatalf("LoadAdapter: %s differs", other.Params()[i].Name)
		}
	}
	// Wrong rank or targets are refused.
	bad, _ := lora.Init(base, lora.InitConfig{Rank: 2, Alpha: 6, Targets: targets, Seed: 5})
	if err := u.LoadAdapter(bad); err == nil {
		t.Error("rank-2 adapter loaded into a rank-3 policy")
	}
	bad, _ = lora.Init(base, lora.InitConfig{Rank: 3, Alpha: 6, Targets: []string{"q"}, Seed: 5})
	if err := u.LoadAdapter(bad); err == nil {
		t.Error("adapter with other targets loaded")
	}
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func pcg(seed uint64) *rand.PCG { return rand.NewPCG(seed, 0) }

func mustRead(t testing.TB, p Policy) [][]float32 {
	t.Helper()
	v, err := p.ReadParams()
	if err != nil {
		t.Fatalf("ReadParams: %v", err)
	}
	return v
}
