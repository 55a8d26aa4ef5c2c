package llama

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

// TestPrefixCache checks that Generate reuses the KV of the previous call's
// sequence 0 (multi-turn prompts), gives the results of an uncached context,
// and never reuses KV computed under other adapter weights.
func TestPrefixCache(t *testing.T) {
	m := loadTiny(t)
	bg := context.Background()
	cached := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 3})
	fresh := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 3, NoPrefixCache: true})
	p := SampleParams{N: 3, MaxTokens: 12, Temperature: 1, Seed: 4, IgnoreEOG: true}
	same := func(what string, prompt []int32, wantReused int) {
		t.Helper()
		a, err := cached.Generate(bg, prompt, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := cached.LastPrefixReused(); got != wantReused {
			t.Fatalf("%s: reused %d prompt tokens, want %d", what, got, wantReused)
		}
		b, err := fresh.Generate(bg, prompt, p)
		if err != nil {
			t.Fatal(err)
		}
		if fresh.LastPrefixReused() != 0 {
			t.Fatalf("NoPrefixCache context reused a prefix")
		}
		for i := range a {
			if !slices.Equal(a[i].Tokens, b[i].Tokens) || maxAbsDiff(a[i].LogProbs, b[i].LogProbs) > 1e-4 {
				t.Fatalf("%s: seq %d cached %v vs uncached %v (logprob diff %g)", what, i, a[i].Tokens, b[i].Tokens, maxAbsDiff(a[i].LogProbs, b[i].LogProbs))
			}
		}
		p.Seed++
	}
	prompt := testPrompt(t, m)
	same("first call", prompt, 0)
	first, err := cached.Generate(bg, prompt, p) // the call whose output the next turn extends
	if err != nil {
		t.Fatal(err)
	}
	turn2 := append(append(slices.Clone(prompt), first[0].Tokens...), mustTokenize(t, m, "<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")...)
	same("next turn", turn2, len(prompt)+len(first[0].Tokens)-1)
	same("same prompt", turn2, len(turn2)-1)
	same("diverging prompt", append(slices.Clone(prompt[:5]), prompt[5:]...)[:len(prompt)-3], len(prompt)-4)

	// adapter state changes invalidate the cache
	pairs := randomPairs(t, tinyPath, adaptedNames, 2, 0.3, 9)
	path := filepath.Join(t.TempDir(), "a.gguf")
	writeAdapter(t, path, "qwen2", 2, 2, pairs)
	ad, err := m.LoadAdapter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	if err := cached.SetAdapter(ad, 1); err != nil {
		t.Fatal(err)
	}
	if err := fresh.SetAdapter(ad, 1); err != nil {
		t.Fatal(err)
	}
	same("after attach", turn2, 0)
	same("adapter unchanged", turn2, len(turn2)-1)
	if err := ad.SetTensor(pairs[0].base+".lora_b", make([]float32, len(pairs[0].b))); err != nil {
		t.Fatal(err)
	}
	same("after SetTensor", turn2, 0)
	if _, err := cached.Score(bg, prompt, first[0].Tokens); err != nil {
		t.Fatal(err)
	}
	same("after Score", turn2, 0)
}
