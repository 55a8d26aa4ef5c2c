package llama

import (
	"context"
	"math"
	"testing"
)

// slotPrompts are three different conversations' first prompts.
func slotPrompts(t *testing.T, m *Model) [][]int32 {
	return [][]int32{
		mustTokenize(t, m, "<|im_start|>user\nYou are in the hallway. Go find the kitchen.<|im_end|>\n<|im_start|>assistant\n"),
		mustTokenize(t, m, "<|im_start|>user\nThe greenhouse has a fern.<|im_end|>\n<|im_start|>assistant\n"),
		mustTokenize(t, m, "<|im_start|>user\nA battery and a red wire lie on the table.<|im_end|>\n<|im_start|>assistant\n"),
	}
}

func sameSeq(t *testing.T, what string, got, want Sequence) {
	t.Helper()
	if len(got.Tokens) != len(want.Tokens) {
		t.Fatalf("%s: %d tokens, want %d", what, len(got.Tokens), len(want.Tokens))
	}
	for i := range got.Tokens {
		if got.Tokens[i] != want.Tokens[i] {
			t.Fatalf("%s: token %d is %d, want %d", what, i, got.Tokens[i], want.Tokens[i])
		}
		if d := math.Abs(float64(got.LogProbs[i] - want.LogProbs[i])); d > 1e-4 {
			t.Fatalf("%s: log-prob %d differs by %g", what, i, d)
		}
	}
}

// TestGenerateSlotsReuseEqualsFresh plays three turns of three
// conversations in persistent slots and checks every turn against
// prefilling each full prompt alone in a fresh context: same tokens, same
// log-probs (1e-4), and only the new tokens decoded.
func TestGenerateSlotsReuseEqualsFresh(t *testing.T) {
	m := loadTiny(t)
	c := newCtx(t, m, ContextParams{NSeqMax: 4, NCtx: 512, NBatch: 64})
	fresh := newCtx(t, m, ContextParams{NSeqMax: 1, NCtx: 512})
	ctx := context.Background()
	prompts := slotPrompts(t, m)
	p := SampleParams{Temperature: 1, MaxTokens: 6}
	obs := mustTokenize(t, m, "<|im_end|>\n<|im_start|>user\nNothing happens.<|im_end|>\n<|im_start|>assistant\n")
	for turn := 0; turn < 3; turn++ {
		reqs := make([]SlotRequest, len(prompts))
		for i := range prompts {
			// slots used in a scrambled order: results must not depend on it
			reqs[i] = SlotRequest{Slot: 3 - i, Prompt: prompts[i], Seed: uint64(10 + turn), Stream: i}
		}
		out, err := c.GenerateSlots(ctx, reqs, p)
		if err != nil {
			t.Fatal(err)
		}
		st := c.LastSlotStats()
		seen := 0
		for i := range prompts {
			seen += len(prompts[i])
			if err := fresh.ClearSlots(); err != nil {
				t.Fatal(err)
			}
			one, err := fresh.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: prompts[i], Seed: uint64(10 + turn), Stream: i}}, p)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.LastSlotStats().PromptDecoded != len(prompts[i]) {
				t.Fatalf("fresh context decoded %d of %d", fresh.LastSlotStats().PromptDecoded, len(prompts[i]))
			}
			sameSeq(t, "turn/conversation", out[i], one[0])
		}
		if st.PromptSeen != seen || st.Requests != 3 {
			t.Fatalf("stats %+v, seen %d", st, seen)
		}
		if turn == 0 && st.PromptDecoded != seen {
			t.Fatalf("first turn decoded %d of %d", st.PromptDecoded, seen)
		}
		if turn > 0 {
			// only each response's last token (sampled, not yet decoded) and
			// the new observation are decoded
			want := 0
			for range prompts {
				want += 1 + len(obs)
			}
			if st.PromptDecoded != want {
				t.Fatalf("turn %d decoded %d prompt tokens, want %d (of %d seen)", turn, st.PromptDecoded, want, seen)
			}
		}
		for i := range prompts {
			// next prompt: the whole response (its last token sampled but
			// not decoded yet) and a new observation
			prompts[i] = append(append(append([]int32(nil), prompts[i]...), out[i].Tokens...), obs...)
		}
	}
}

// TestGenerateSlotsIndependent: working in one slot leaves the others
// intact; a shorter or diverging prompt keeps only the common prefix.
func TestGenerateSlotsIndependent(t *testing.T) {
	m := loadTiny(t)
	c := newCtx(t, m, ContextParams{NSeqMax: 2, NCtx: 512})
	ctx := context.Background()
	pr := slotPrompts(t, m)
	p := SampleParams{Temperature: 1, MaxTokens: 4}
	a, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: pr[0], Seed: 1}}, p)
	if err != nil {
		t.Fatal(err)
	}
	held := c.SlotTokens(0)
	if len(held) != len(pr[0])+len(a[0].Tokens)-1 {
		t.Fatalf("slot 0 holds %d tokens", len(held))
	}
	// slot 1 busy with other prompts, twice
	for k := 1; k < 3; k++ {
		if _, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 1, Prompt: pr[k], Seed: 2}}, p); err != nil {
			t.Fatal(err)
		}
	}
	// slot 0 again with the same prompt: one token decoded, same answer
	again, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: pr[0], Seed: 1}}, p)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.LastSlotStats().PromptDecoded; d != 1 {
		t.Fatalf("decoded %d tokens, want 1", d)
	}
	sameSeq(t, "slot 0 after slot 1 work", again[0], a[0])
	// a diverging prompt in slot 0 keeps the common prefix only
	div := append(append([]int32(nil), pr[0][:5]...), pr[1][5:]...)
	if _, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: div, Seed: 1}}, p); err != nil {
		t.Fatal(err)
	}
	if d := c.LastSlotStats().PromptDecoded; d != len(div)-5 {
		t.Fatalf("decoded %d tokens, want %d", d, len(div)-5)
	}
	// Generate uses the KV cache itself: every slot is forgotten
	if _, err := c.Generate(ctx, pr[2], p); err != nil {
		t.Fatal(err)
	}
	if c.SlotTokens(0) != nil {
		t.Fatal("slots survived Generate")
	}
	if _, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: pr[0], Seed: 1}}, p); err != nil {
		t.Fatal(err)
	}
	if d := c.LastSlotStats().PromptDecoded; d != len(pr[0]) {
		t.Fatalf("after Generate decoded %d tokens, want %d", d, len(pr[0]))
	}
	if err := c.ClearSlot(0); err != nil || c.SlotTokens(0) != nil {
		t.Fatal("ClearSlot", err)
	}
}

func TestGenerateSlotsBadInput(t *testing.T) {
	m := loadTiny(t)
	c := newCtx(t, m, ContextParams{NSeqMax: 2, NCtx: 256})
	ctx := context.Background()
	pr := slotPrompts(t, m)
	p := SampleParams{Temperature: 1, MaxTokens: 4}
	for name, reqs := range map[string][]SlotRequest{
		"none":      nil,
		"too many":  {{Slot: 0, Prompt: pr[0]}, {Slot: 1, Prompt: pr[1]}, {Slot: 1, Prompt: pr[2]}},
		"duplicate": {{Slot: 1, Prompt: pr[0]}, {Slot: 1, Prompt: pr[1]}},
		"range":     {{Slot: 2, Prompt: pr[0]}},
		"negative":  {{Slot: -1, Prompt: pr[0]}},
		"empty":     {{Slot: 0}},
		"token":     {{Slot: 0, Prompt: []int32{1 << 20}}},
		"long":      {{Slot: 0, Prompt: make([]int32, 300)}},
		"max":       {{Slot: 0, Prompt: pr[0], MaxTokens: -1}},
	} {
		if _, err := c.GenerateSlots(ctx, reqs, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 0, Prompt: pr[0]}}, SampleParams{N: 2}); err == nil {
		t.Error("N 2: no error")
	}
	if err := c.ClearSlot(5); err == nil {
		t.Error("ClearSlot(5): no error")
	}
	// still works after the errors
	if _, err := c.GenerateSlots(ctx, []SlotRequest{{Slot: 1, Prompt: pr[0]}}, p); err != nil {
		t.Fatal(err)
	}
}
