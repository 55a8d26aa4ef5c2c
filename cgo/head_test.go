package cgo

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHeadTargetGather: the target logits z[target] are gathered with a
// one-hot (SET_ROWS into zeros, MUL, SUM_ROWS), not with a GET_ROWS of the
// [V, M] logits viewed as V·M rows: that gather's backward, GET_ROWS_BACK,
// has one destination row per logit, and ggml-cuda launches one grid row
// per destination row, so any V·M over 65,535 failed on the GPU with "CUDA
// error: invalid argument" (an H200, 2026-11-27; every real vocabulary).
// Here V·M = 4,096 × 48 = 196,608. A LoRA step then has one GET_ROWS_BACK,
// the gather of the M predicting rows of the hidden states ([C, N]
// destination), and the log-probs of the step are those of the scoring
// path (the float64-reference tests check both against the maths).
func TestHeadTargetGather(t *testing.T) {
	cfg := tinyCfg()
	cfg.Vocab = 4096
	m := mustLoad(t, tinyModel(t, cfg), LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}, Options{Threads: 2})
	defer m.Close()
	batch := benchBatch(rand.New(rand.NewPCG(2, 9)), cfg.Vocab, 2, 64, 24)
	obj := DefaultObjective()
	ops, _, err := m.ProfileStep(batch, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, o := range ops {
		count[strings.Fields(o.Key)[1]] += o.Count
	}
	if count["GET_ROWS_BACK"] != 1 || count["SET_ROWS"] != 1 {
		t.Fatalf("LoRA step: %d GET_ROWS_BACK and %d SET_ROWS nodes, want 1 and 1 (ops %v)", count["GET_ROWS_BACK"], count["SET_ROWS"], count)
	}
	// the step's log-probs are the scoring path's, bit for bit
	got, err := m.TrainedLogProbs(batch, obj)
	if err != nil {
		t.Fatal(err)
	}
	for b, s := range batch {
		all, err := m.LogProbs(s.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		for i, tr := range s.Trained {
			if tr && got[b][i] != all[i] {
				t.Fatalf("sequence %d position %d: trained log-prob %g, LogProbs %g", b, i, got[b][i], all[i])
			}
		}
	}
}
