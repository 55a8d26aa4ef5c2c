package cgo

import (
	"math/rand/v2"
	"testing"

	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/modelgen"
)

// BenchmarkLogProbsAtQwenVocab: π_old's forward on behaviour sequences at
// Qwen's real vocabulary (the tiny model, 2 layers, hidden 64, with Qwen's
// tokenizer padded to 152,064 tokens, tied; one thread): 8 sequences of 420
// tokens, 96 head rows each (6 responses of 16 tokens), BenchmarkOffPolicyStep's
// shape. At this width the head's [V, rows] passes are the cost.
func BenchmarkLogProbsAtQwenVocab(b *testing.B) {
	tok, err := modelgen.LoadHFTokenizer(qwentok.Dir(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg := modelgen.DefaultConfig()
	cfg.HFTokenizer, cfg.Vocab, cfg.TiedEmbeddings, cfg.Ctx = tok, 152064, true, 2048
	m, err := Load(tinyModel(b, cfg), LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(1, 2))
	var seqs [][]int32
	var want [][]bool
	for i := 0; i < 8; i++ {
		s := make([]int32, 420)
		for k := range s {
			s[k] = int32(r.IntN(150000))
		}
		w := make([]bool, 420)
		for k := 0; k < 6; k++ {
			for j := 0; j < 16; j++ {
				w[60+k*60+j] = true
			}
		}
		seqs, want = append(seqs, s), append(want, w)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.LogProbsAt(seqs, want); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/call")
}
