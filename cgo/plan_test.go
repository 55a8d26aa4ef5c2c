package cgo

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// tailMask wants the last n positions of each sequence.
func tailMask(seqs [][]int32, n int) [][]bool {
	want := make([][]bool, len(seqs))
	for i, s := range seqs {
		want[i] = make([]bool, len(s))
		for t := max(1, len(s)-n); t < len(s); t++ {
			want[i][t] = true
		}
	}
	return want
}

// TestResponseOnlyMatchesFullLogits: log-probs computed for the response
// rows alone (LogProbsAt) equal, bit for bit, those of the same graph with
// every position projected to the vocabulary (LogProbsBatch, the
// full-logit computation), on the tail of each sequence and on a scattered
// mask; and a training step whose head sees only the trained rows gives the
// same gradients, bit for bit, as one that projects every row and gives the
// untrained ones zero coefficients. Bit for bit because nothing a row's
// result depends on changes: the blocks compute the same [C, N] hidden
// states (same tokens, same padded batch), each gathered row goes through a
// row-wise RMSNorm, a column of the head matmul (one dot product per
// vocabulary entry, whatever the number of columns) and a column-wise
// softmax; in the backward the untrained rows' coefficients are exact zeros,
// so their scattered gradient adds +0 to the same [C, N] tensor.
func TestResponseOnlyMatchesFullLogits(t *testing.T) {
	for _, vocab := range []int{512, 4096} {
		cfg := tinyCfg()
		cfg.Vocab = vocab
		m := loadTiny(t, cfg, LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}, Options{Threads: 1})
		rng := rand.New(rand.NewPCG(7, uint64(vocab)))
		seqs := [][]int32{randTokens(rng, 40, vocab), randTokens(rng, 23, vocab), randTokens(rng, 57, vocab)}
		full, err := m.LogProbsBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		scattered := tailMask(seqs, 0)
		for i := range scattered {
			for t := 1; t < len(seqs[i]); t += 3 + i {
				scattered[i][t] = true
			}
			scattered[i][len(seqs[i])-1] = true // same padded length as the full graph
		}
		for name, want := range map[string][][]bool{"tail": tailMask(seqs, 9), "scattered": scattered} {
			part, err := m.LogProbsAt(seqs, want)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for i := range seqs {
				for p := range seqs[i] {
					switch {
					case want[i][p]:
						n++
						if math.Float32bits(part[i][p]) != math.Float32bits(full[i][p]) {
							t.Fatalf("V %d %s: seq %d pos %d: response-only %v, full logits %v", vocab, name, i, p, part[i][p], full[i][p])
						}
					case part[i][p] != 0:
						t.Fatalf("V %d %s: seq %d pos %d not wanted but %v", vocab, name, i, p, part[i][p])
					}
				}
			}
			if n == 0 {
				t.Fatal("no wanted rows")
			}
		}

		// gradients: the trained rows alone vs every row with zero coefficients
		// for the untrained ones (advantage 0, no clip region that reacts to
		// it, no KL or entropy term, fixed loss scale)
		obj := DefaultObjective()
		resp := make([]Sequence, len(seqs))
		all := make([]Sequence, len(seqs))
		for i, s := range seqs {
			L := len(s)
			resp[i] = Sequence{Tokens: s, Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L)}
			all[i] = Sequence{Tokens: s, Trained: make([]bool, L), OldLogp: make([]float32, L), Advantage: make([]float32, L)}
			for t := 1; t < L; t++ {
				all[i].Trained[t] = true
				all[i].OldLogp[t] = full[i][t]
				if t >= L-9 {
					resp[i].Trained[t] = true
					resp[i].OldLogp[t] = full[i][t] - 0.3
					resp[i].Advantage[t] = float32(rng.NormFloat64())
					all[i].OldLogp[t], all[i].Advantage[t] = resp[i].OldLogp[t], resp[i].Advantage[t]
				}
			}
		}
		mustZero(t, m)
		if _, err := m.ForwardBackward(resp, obj, 0.01); err != nil {
			t.Fatal(err)
		}
		gResp := mustGrads(t, m)
		mustZero(t, m)
		if _, err := m.ForwardBackward(all, obj, 0.01); err != nil {
			t.Fatal(err)
		}
		gAll := mustGrads(t, m)
		if countNonzero(gResp) == 0 {
			t.Fatal("zero gradient")
		}
		if !equalParams(gResp, gAll) {
			t.Fatalf("V %d: gradients differ: relative L2 %.3g", vocab, relL2(gResp, gAll))
		}
	}
}

// TestLogProbsAtBadInput: masks of the wrong count or length, or wanting
// position 0, are ErrShape.
func TestLogProbsAtBadInput(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 1}, Options{Threads: 1})
	seqs := [][]int32{{1, 2, 3, 4}, {5, 6, 7}}
	for name, want := range map[string][][]bool{
		"count":  {{false, true, true, true}},
		"length": {{false, true}, nil},
		"first":  {{true, true, true, true}, nil},
	} {
		if _, err := m.LogProbsAt(seqs, want); !errors.Is(err, ErrShape) {
			t.Errorf("%s: got %v, want ErrShape", name, err)
		}
	}
	out, err := m.LogProbsAt(seqs, [][]bool{{false, false, false, false}, nil})
	if err != nil {
		t.Fatal(err)
	}
	if out[0][3] != 0 || out[1][2] == 0 {
		t.Fatalf("nothing wanted in seq 0, everything in seq 1: %v", out)
	}
}

// TestComputeCapSplits: with a cap at half of what the batch needs,
// every call is split over several graphs, none above the cap (the
// allocator's own measure), and the results are those of one graph: the
// log-probs within float rounding (a cut sequence is shorter, so its
// padded length and the order of some reductions change), the statistics
// likewise, the gradients within relative L2 1e-5; TrainedLogProbs still
// gives ratios of exactly 1 in ForwardBackward (both plan the same
// graphs); a failure in a later graph leaves the accumulators as they were.
func TestComputeCapSplits(t *testing.T) {
	cfg := tinyCfg()
	cfg.Vocab = 4096
	lora := LoRAConfig{Rank: 4, Alpha: 8, Seed: 9, RandomB: true}
	ref := loadTiny(t, cfg, lora, Options{Threads: 1, MaxComputeBytes: -1})
	rng := rand.New(rand.NewPCG(3, 4))
	seqs := [][]int32{randTokens(rng, 120, cfg.Vocab), randTokens(rng, 60, cfg.Vocab), randTokens(rng, 200, cfg.Vocab), randTokens(rng, 90, cfg.Vocab)}
	want, err := ref.LogProbsBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	one := ref.MemoryBytes().ComputeLast
	if ref.MemoryBytes().ComputeCap >= 0 {
		t.Fatalf("MaxComputeBytes -1: cap %d in force", ref.MemoryBytes().ComputeCap)
	}
	capB := one / 2
	m := loadTiny(t, cfg, lora, Options{Threads: 1, MaxComputeBytes: capB})
	if got := m.MemoryBytes().ComputeCap; got != capB {
		t.Fatalf("cap in force %d, want %d", got, capB)
	}
	got, err := m.LogProbsBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	if mem := m.MemoryBytes(); mem.Compute > capB || mem.Compute == 0 {
		t.Fatalf("largest graph %d bytes, cap %d", mem.Compute, capB)
	}
	worst := 0.0
	for i := range seqs {
		for t := 1; t < len(seqs[i]); t++ {
			worst = math.Max(worst, math.Abs(float64(got[i][t]-want[i][t])))
		}
	}
	if worst > 1e-4 {
		t.Fatalf("split log-probs differ from one graph's by %g", worst)
	}
	t.Logf("one graph %d B, cap %d B: max |Δ logp| %.3g", one, capB, worst)

	// training: sequences with long trained tails so that rows are split too
	batch := make([]Sequence, len(seqs))
	for i, s := range seqs {
		batch[i] = rlSeq(s, len(s)*2/3, float32(i)-1.5)
		for t := range s {
			if batch[i].Trained[t] {
				batch[i].OldLogp[t] = want[i][t] + 0.05*float32(t%5-2)
			}
		}
	}
	obj := DefaultObjective()
	obj.EntropyCoef = 0.01
	stRef, err := ref.ForwardBackward(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.ForwardBackward(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	if stRef.Graphs != 1 || st.Graphs < 3 || st.ComputeBytes > capB {
		t.Fatalf("graphs: uncapped %d, capped %d (largest %d B, cap %d B)", stRef.Graphs, st.Graphs, st.ComputeBytes, capB)
	}
	if st.Tokens != stRef.Tokens || st.Sequences != stRef.Sequences || math.Abs(st.Loss-stRef.Loss) > 1e-5*math.Abs(stRef.Loss) ||
		math.Abs(st.Entropy-stRef.Entropy) > 1e-5*stRef.Entropy || math.Abs(st.ClipFrac-stRef.ClipFrac) > 0.02 {
		t.Fatalf("stats: capped %+v\nuncapped %+v", st, stRef)
	}
	gRef, g := mustGrads(t, ref), mustGrads(t, m)
	if rel := relL2(g, gRef); rel > 1e-5 {
		t.Fatalf("split gradients: relative L2 %.3g", rel)
	}
	t.Logf("training: %d graphs, largest %d B; loss %.9g vs %.9g, gradient relative L2 %.3g", st.Graphs, st.ComputeBytes, st.Loss, stRef.Loss, relL2(g, gRef))

	// π_old from TrainedLogProbs gives ratios of exactly 1
	old, err := m.TrainedLogProbs(batch, obj)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		copy(batch[i].OldLogp, old[i])
	}
	ev, err := m.Evaluate(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ApproxKL != 0 || ev.ApproxKLK1 != 0 || ev.ClipFrac != 0 || ev.Graphs != st.Graphs {
		t.Fatalf("TrainedLogProbs vs the split graphs: KL %g / %g, clip %g, graphs %d vs %d", ev.ApproxKL, ev.ApproxKLK1, ev.ClipFrac, ev.Graphs, st.Graphs)
	}

	// a failure in the third graph undoes the first two
	before := mustGrads(t, m)
	boom := errors.New("boom")
	testFailGraph = func(k int) error {
		if k == 2 {
			return boom
		}
		return nil
	}
	_, err = m.ForwardBackward(batch, obj, 0)
	testFailGraph = nil
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the objective's error", err)
	}
	if !equalParams(mustGrads(t, m), before) {
		t.Fatal("a failed split step changed the gradient accumulators")
	}
}

// TestComputeBudget: ComputeBudgetBytes lowers the default cap to the
// budget and never raises it; an explicit MaxComputeBytes wins.
func TestComputeBudget(t *testing.T) {
	cfg := tinyCfg()
	lora := LoRAConfig{Rank: 2, Alpha: 4, Seed: 1}
	def := loadTiny(t, cfg, lora, Options{Threads: 1}).MemoryBytes().ComputeCap
	if def <= 0 {
		t.Fatalf("default cap %d", def)
	}
	for _, c := range []struct {
		opts Options
		want int64
	}{
		{Options{Threads: 1, ComputeBudgetBytes: def / 3}, def / 3},
		{Options{Threads: 1, ComputeBudgetBytes: 2 * def}, def},
		{Options{Threads: 1, ComputeBudgetBytes: def / 3, MaxComputeBytes: def / 2}, def / 2},
		{Options{Threads: 1, ComputeBudgetBytes: def / 3, MaxComputeBytes: -1}, -1},
	} {
		if got := loadTiny(t, cfg, lora, c.opts).MemoryBytes().ComputeCap; got != c.want {
			t.Errorf("%+v: cap %d, want %d", c.opts, got, c.want)
		}
	}
}

// TestComputeCapRefuses: when one row of one sequence does not fit, the
// call is refused with ErrComputeCap naming the sizes, before anything is
// computed or accumulated.
func TestComputeCapRefuses(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 1, RandomB: true}, Options{Threads: 1, MaxComputeBytes: 4096})
	rng := rand.New(rand.NewPCG(1, 2))
	s := randTokens(rng, 50, 512)
	_, err := m.LogProbs(s)
	if !errors.Is(err, ErrComputeCap) {
		t.Fatalf("got %v, want ErrComputeCap", err)
	}
	for _, w := range []string{"position 1", "vocabulary 512", "forward", "MiB", "4096 bytes"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	before := mustGrads(t, m)
	if _, err := m.ForwardBackward([]Sequence{rlSeq(s, 10, 1)}, DefaultObjective(), 0); !errors.Is(err, ErrComputeCap) || !strings.Contains(err.Error(), "training") {
		t.Fatalf("got %v, want ErrComputeCap for the training graph", err)
	}
	if !equalParams(mustGrads(t, m), before) {
		t.Fatal("a refused step changed the gradients")
	}
	if mem := m.MemoryBytes(); mem.Compute != 0 || mem.ComputeAlloc != 0 {
		t.Fatalf("nothing was computed, yet compute peak %d, allocated %d", mem.Compute, mem.ComputeAlloc)
	}
}

// TestComputeBuffersReleased: a graph above KeepComputeBytes does not stay
// resident after the call (ComputeAlloc 0), one below it does, and
// KeepComputeBytes < 0 keeps everything; the peak is kept until
// ResetComputePeak.
func TestComputeBuffersReleased(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	seqs := [][]int32{randTokens(rng, 300, 512), randTokens(rng, 280, 512)}
	for _, c := range []struct {
		keep      int64
		wantAlloc bool
	}{{1 << 10, false}, {1 << 30, true}, {-1, true}} {
		m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 1}, Options{Threads: 1, KeepComputeBytes: c.keep})
		if _, err := m.LogProbsBatch(seqs); err != nil {
			t.Fatal(err)
		}
		mem := m.MemoryBytes()
		if mem.ComputeLast == 0 || mem.Compute < mem.ComputeLast || (mem.ComputeAlloc > 0) != c.wantAlloc || (c.wantAlloc && mem.ComputeAlloc < mem.ComputeLast) {
			t.Fatalf("keep %d: %+v", c.keep, mem)
		}
		if err := m.ResetComputePeak(); err != nil {
			t.Fatal(err)
		}
		if m.MemoryBytes().Compute != 0 {
			t.Fatal("ResetComputePeak left the peak")
		}
		if _, err := m.LogProbs(seqs[0][:20]); err != nil {
			t.Fatal(err)
		}
		if mem2 := m.MemoryBytes(); mem2.Compute != mem2.ComputeLast || mem2.Compute >= mem.Compute {
			t.Fatalf("peak after reset %d, last %d (before %d)", mem2.Compute, mem2.ComputeLast, mem.Compute)
		}
	}
}

// TestComputeRefTokens: the default cap fits the training graph of one
// sequence of min(context, 2048) tokens, so with the attention unchunked
// (AttentionBlockBytes < 0: its T² matrices dominate) a model with a
// 4096-token context refuses a log-prob near the end of a 3900-token
// sequence; with ComputeRefTokens at the context the cap fits it (and the
// cap is that of a 4096-token training graph, whatever larger value is
// asked). With the default chunked attention the same sequence fits the
// default cap.
func TestComputeRefTokens(t *testing.T) {
	cfg := tinyCfg()
	cfg.Ctx = 4096
	lora := LoRAConfig{Rank: 2, Alpha: 4, Seed: 1, RandomB: true}
	rng := rand.New(rand.NewPCG(7, 7))
	s := randTokens(rng, 3900, cfg.Vocab)
	last := make([]bool, len(s))
	last[len(s)-1] = true
	chunked := loadTiny(t, cfg, lora, Options{Threads: 1})
	want, err := chunked.LogProbsAt([][]int32{s}, [][]bool{last})
	if err != nil {
		t.Fatalf("chunked attention, default cap: %v", err)
	}
	def := loadTiny(t, cfg, lora, Options{Threads: 1, AttentionBlockBytes: -1})
	if _, err := def.LogProbsAt([][]int32{s}, [][]bool{last}); !errors.Is(err, ErrComputeCap) {
		t.Fatalf("default cap: got %v, want ErrComputeCap", err)
	}
	long := loadTiny(t, cfg, lora, Options{Threads: 1, ComputeRefTokens: 4096, AttentionBlockBytes: -1})
	got, err := long.LogProbsAt([][]int32{s}, [][]bool{last})
	if err != nil {
		t.Fatal(err)
	}
	if lp := got[0][len(s)-1]; !(lp < 0) || lp != want[0][len(s)-1] {
		t.Fatalf("log-prob %v unchunked, %v chunked", lp, want[0][len(s)-1])
	}
	capDef, capLong := def.MemoryBytes().ComputeCap, long.MemoryBytes().ComputeCap
	if capLong <= capDef {
		t.Fatalf("cap for 4096 tokens %d, not above the default %d", capLong, capDef)
	}
	beyond := loadTiny(t, cfg, lora, Options{Threads: 1, ComputeRefTokens: 100000, AttentionBlockBytes: -1})
	if c := beyond.MemoryBytes().ComputeCap; c != capLong {
		t.Fatalf("ComputeRefTokens past the context: cap %d, want the context's %d", c, capLong)
	}
	if _, err := Load(tinyModel(t, cfg), lora, Options{Threads: 1, ComputeRefTokens: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("ComputeRefTokens -1: %v", err)
	}
	t.Logf("cap (unchunked): default %d MiB, 4096 tokens %d MiB; chunked: default %d MiB, the 3900-token forward needed %d MiB",
		capDef>>20, capLong>>20, chunked.MemoryBytes().ComputeCap>>20, chunked.MemoryBytes().ComputeLast>>20)
}
