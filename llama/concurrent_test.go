package llama

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// TestConcurrentContexts runs several contexts of one model from several
// goroutines (and one context from two goroutines) and checks each result
// against a sequential reference. Run with -race.
func TestConcurrentContexts(t *testing.T) {
	m := loadTiny(t)
	prompt := testPrompt(t, m)
	p := SampleParams{N: 2, MaxTokens: 12, Temperature: 1, Seed: 21, IgnoreEOG: true}
	ref := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 2, Threads: 1})
	want, err := ref.Generate(context.Background(), prompt, p)
	if err != nil {
		t.Fatal(err)
	}
	ctxs := []*Context{ref}
	for i := 0; i < 3; i++ {
		ctxs = append(ctxs, newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 2, Threads: 1}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 6; g++ {
		c := ctxs[g%len(ctxs)] // ctxs[0] and [1] are shared by two goroutines
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; it < 2; it++ {
				got, err := c.Generate(context.Background(), prompt, p)
				if err != nil {
					errs <- err
					return
				}
				for i := range got {
					if !slices.Equal(got[i].Tokens, want[i].Tokens) {
						t.Errorf("concurrent generation differs from sequential")
					}
				}
				if _, err := m.Tokenize("concurrent tokenization ✓", false, true); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestConcurrentAdapterUpdate writes adapter weights while other goroutines
// generate and score with the adapter attached.
func TestConcurrentAdapterUpdate(t *testing.T) {
	m := loadTiny(t)
	pairs := randomPairs(t, tinyPath, adaptedNames[:2], 2, 0.2, 5)
	path := filepath.Join(t.TempDir(), "a.gguf")
	writeAdapter(t, path, "qwen2", 4, 2, pairs)
	ad, err := m.LoadAdapter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	prompt := testPrompt(t, m)
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		c := newCtx(t, m, ContextParams{NCtx: 256, NSeqMax: 2, Threads: 1})
		if err := c.SetAdapter(ad, 1); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; it < 3; it++ {
				seqs, err := c.Generate(context.Background(), prompt, SampleParams{N: 2, MaxTokens: 8, Temperature: 1, Seed: uint64(it)})
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Score(context.Background(), prompt, seqs[0].Tokens); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for it := 0; it < 10; it++ {
			for _, p := range pairs {
				b := slices.Clone(p.b)
				for i := range b {
					b[i] *= float32(it%3) * 0.5
				}
				if err := ad.SetTensor(p.base+".lora_b", b); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	// closing the adapter while attached defers the free to the contexts
	ad.Close()
}
