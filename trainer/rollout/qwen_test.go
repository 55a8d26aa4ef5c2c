package rollout_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/rollout"
)

// qwenModel writes and loads a tiny Qwen2 GGUF carrying the real Qwen
// vocabulary (../shared/qwen-tokenizer, as `empo2 model init --tokenizer`
// writes it; the test skips without it) with Qwen2.5's ChatML template,
// or with the folder's own template, Qwen3's (qwen3).
func qwenModel(t *testing.T, qwen3 bool) *llama.Model {
	t.Helper()
	tok, err := modelgen.LoadHFTokenizer(qwentok.Dir(t))
	require.NoError(t, err)
	require.Contains(t, tok.ChatTemplate, "enable_thinking", "the folder's template is Qwen3's")
	if !qwen3 {
		tok.ChatTemplate = modelgen.ChatTemplate() // Qwen2.5's
	}
	cfg := modelgen.DefaultConfig()
	cfg.HFTokenizer, cfg.Vocab, cfg.TiedEmbeddings, cfg.Ctx = tok, 152064, true, 8192
	path := filepath.Join(t.TempDir(), "qwen.gguf")
	require.NoError(t, modelgen.Write(path, cfg))
	m, err := llama.LoadModel(path, llama.ModelParams{UseMmap: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// sciworldText is ScienceWorld-style text (the simulator's layout: tabs,
// parentheses, "(containing …)", "that is open"), written by hand: the
// simulator's jar is not here.
func sciworldText() []episodeText {
	obs := []string{
		"This room is called the kitchen. In it, you see: \n\tthe agent\n\ta substance called air\n\ta chair. On the chair is: nothing.\n\ta counter. On the counter is: a bowl (containing a red apple, a banana, an orange, a potato), a drawer.\n\ta cupboard. The cupboard door is closed. \n\ta freezer. The freezer door is closed. \n\ta fridge. The fridge door is closed. \n\ta glass jar (containing a substance called sodium chloride)\n\ta lighter\n\ta oven, which is turned off. The oven door is closed. \n\ta painting\n\ta sink, which is turned off. In the sink is: nothing.\n\ta stove, which is turned off. On the stove is: nothing.\n\ta table. On the table is: a glass cup (containing nothing).\n\ta thermometer, currently reading a temperature of 10 degrees celsius\nYou also see:\n\tA door to the bathroom (that is open)\n\tA door to the hallway (that is open)\n\tA door to the outside (that is open)",
		"The cupboard is now open.",
		"You move the metal pot to the stove.",
		"The stove is now activated.",
		"a substance called water, which is a liquid (temperature 56 degrees celsius).",
		"You focus on the water.\n",
		"No known action matches that input.",
		"Ambiguous request: Please enter the number for the action you intended (or blank to cancel):\n0:\tmove metal pot (in kitchen, in counter) to stove (in kitchen)\n1:\tmove metal pot (in inventory) to stove (in kitchen)",
	}
	acts := []string{"open cupboard", "move metal pot to stove", "activate stove", "examine substance in metal pot", "focus on substance in metal pot", "wait1", "0", "look around"}
	ep := episodeText{task: "boil", variation: 3, name: "boil/3", desc: "Your task is to boil water. For compounds without a boiling point, combusting the substance is also acceptable. First, focus on the substance. Then, take actions that will cause it to change its state of matter.", first: obs[0]}
	for i := 1; i < len(obs); i++ {
		ep.turns = append(ep.turns, rollout.Turn{Action: acts[i-1], Observation: obs[i]})
	}
	return []episodeText{ep}
}

// tipBlock is a realistic block of n entries (tips ending in ".", quotes,
// scores), as FormatTips renders them.
func tipBlock(n, seed int) string {
	tips := []string{
		"I opened the cupboard, found the metal pot and moved it to the stove; the water was still 56 degrees when the episode ended, about halfway.",
		"Searching for \"red shoes\" gave nothing under $40 (maybe \"running shoes\" next time); I bought the wrong size.",
		"The greenhouse holds the plants: go there first, then focus on the living thing.\tNothing else scored.",
		"Score 0: I kept looking around the hallway.",
	}
	acts := []string{"open cupboard", "search[red running shoes]", "click[< Prev]", "teleport to kitchen", "focus on fern"}
	var ms []memstore.Match
	for i := 0; i < n; i++ {
		c := rollout.TipContent(tips[(seed+i)%len(tips)], acts[(seed+2*i)%len(acts)], float64((seed*37+i*13)%101))
		ms = append(ms, memstore.Match{Entry: memstore.Entry{Content: c}})
	}
	return rollout.FormatTips(ms)
}

// TestQwenCanonicalTokenization: on the real Qwen vocabulary and ChatML,
// over textlab, WebShop and ScienceWorld-style episodes with blocks of 1, 3
// and 10 tips in every turn or in the last only, every prompt is the whole
// rendered text tokenized at once (special tokens parsed, as Qwen's
// tokenizer does); the prompt without tips is its own whole-text
// tokenization and holds no tip text; where every block falls on token
// boundaries, cutting the blocks out gives the same tokens; and with tips
// in every turn each prompt extends the previous one and its response.
func TestQwenCanonicalTokenization(t *testing.T) {
	m := qwenModel(t, false)
	r, err := rollout.NewRenderer(m, rollout.DefaultPromptConfig())
	require.NoError(t, err)
	require.False(t, r.ThinkingOff())
	eot := r.EndOfTurn()
	require.Equal(t, int32(151645), eot, "<|im_end|>")
	eps := append(playRandom(t, "textlab", [][2]any{{"melt", 0}, {"find-living-thing", 2}}, 1, 5),
		playRandom(t, "webshop", [][2]any{{"webshop", 600}}, 1, 5)...)
	eps = append(eps, sciworldText()...)
	prompts, aligned, unaligned := 0, 0, 0
	for _, ep := range eps {
		for _, n := range []int{1, 3, 10} {
			for _, every := range []bool{true, false} {
				var prev []int32
				for step := 0; step <= len(ep.turns); step++ {
					turns := slices.Clone(ep.turns[:step])
					bare := slices.Clone(turns)
					var resps [][]int32
					for i := range turns {
						if every {
							turns[i].Tips = tipBlock(n, i)
						}
						resp, err := m.Tokenize(turns[i].Action, false, false)
						require.NoError(t, err)
						resps = append(resps, resp)
					}
					msgs := rollout.Messages(r.Config(), ep.desc, ep.first, turns, tipBlock(n, step))
					noMsgs := rollout.Messages(r.Config(), ep.desc, ep.first, bare, "")
					with, err := r.TokensWithResponses(msgs, resps, true)
					require.NoError(t, err)
					without, err := r.TokensWithResponses(noMsgs, resps, true)
					require.NoError(t, err)
					prompts++
					where := fmt.Sprintf("%s, %d tips, every-turn %v, step %d", ep.name, n, every, step)
					require.Equal(t, wholeText(t, r, msgs, true), with.Tokens, "%s: prompt", where)
					require.Equal(t, wholeText(t, r, noMsgs, true), without.Tokens, "%s: prompt without tips", where)
					text, err := m.Detokenize(without.Tokens)
					require.NoError(t, err)
					require.NotContains(t, text, rollout.TipsBegin, where)
					require.NotContains(t, text, rollout.TipsHeader, where)
					require.NotContains(t, text, "the episode ended with score", where)
					wantBlocks := 1
					if every {
						wantBlocks += step
					}
					require.Len(t, with.Tips, wantBlocks, where)
					if with.TipsAligned {
						aligned++
						require.Equal(t, without.Tokens, with.WithoutTips(), "%s: the old cut", where)
					} else {
						unaligned++
					}
					if every && prev != nil {
						base := append(append(slices.Clone(prev), resps[step-1]...), eot)
						require.Equal(t, base, with.Tokens[:len(base)], "%s: extends the previous prompt", where)
					}
					prev = with.Tokens
				}
			}
		}
	}
	t.Logf("%d prompts (and as many without tips) equal their whole-text tokenization; tip blocks on token boundaries in %d (the old cut equal there), inside a token in %d", prompts, aligned, unaligned)
	assert.Positive(t, aligned)
	assert.Positive(t, unaligned, "some message ends in a way Qwen merges with the blank line (\".\\n\\n\")")
}

// qwenSpecialID reads an added token's id from the folder's tokenizer.json.
func qwenSpecialID(t *testing.T, content string) int32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(qwentok.Dir(t), "tokenizer.json"))
	require.NoError(t, err)
	var tj struct {
		AddedTokens []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	require.NoError(t, json.Unmarshal(b, &tj))
	for _, a := range tj.AddedTokens {
		if a.Content == content {
			return a.ID
		}
	}
	t.Fatalf("no added token %q", content)
	return -1
}

// TestQwen3ThinkingOff: with Qwen3's template (tokenizer_config.json) the
// renderer opens every assistant turn with the empty think block that the
// template writes when enable_thinking is false: a one-turn chat renders
// exactly as that Jinja template does; the history keeps the block (the
// template itself drops it from earlier turns, which would change the
// prefix every turn), so prompts still extend each other; the tokens are
// the whole text's, with <think> and </think> as Qwen's single tokens.
func TestQwen3ThinkingOff(t *testing.T) {
	m := qwenModel(t, true)
	r, err := rollout.NewRenderer(m, rollout.DefaultPromptConfig())
	require.NoError(t, err)
	require.True(t, r.ThinkingOff())
	pc := r.Config()
	msgs := rollout.Messages(pc, "Boil water.", "This room is called the kitchen.", nil, tipBlock(3, 1))
	text, err := r.Text(msgs, true)
	require.NoError(t, err)
	// Qwen3's Jinja template with enable_thinking=false, written out
	want := "<|im_start|>system\n" + pc.SystemText() + "<|im_end|>\n<|im_start|>user\n" + msgs[1].Content + "<|im_end|>\n" +
		"<|im_start|>assistant\n<think>\n\n</think>\n\n"
	require.Equal(t, want, text)
	ct, err := r.Tokens(msgs, true)
	require.NoError(t, err)
	require.Equal(t, wholeText(t, r, msgs, true), ct.Tokens)
	think, endThink := qwenSpecialID(t, "<think>"), qwenSpecialID(t, "</think>")
	imStart := qwenSpecialID(t, "<|im_start|>")
	nl2, err := m.Tokenize("\n\n", false, false)
	require.NoError(t, err)
	tail := append(append(append([]int32{imStart}, mustTok(t, m, "assistant\n")...), think), nl2...)
	tail = append(append(tail, endThink), nl2...)
	require.Equal(t, tail, ct.Tokens[len(ct.Tokens)-len(tail):], "the generation prompt ends with the empty think block")

	// history: every assistant turn keeps the block; prompts extend
	turns := []rollout.Turn{{Action: "open cupboard", Observation: "The cupboard is now open.", Tips: tipBlock(3, 1)}}
	resp := mustTok(t, m, "open cupboard")
	next, err := r.TokensWithResponses(rollout.Messages(pc, "Boil water.", "This room is called the kitchen.", turns, ""), [][]int32{resp}, true)
	require.NoError(t, err)
	base := append(append(slices.Clone(ct.Tokens), resp...), r.EndOfTurn())
	require.Greater(t, len(next.Tokens), len(base))
	require.Equal(t, base, next.Tokens[:len(base)])
	ntext, err := m.Detokenize(next.Tokens)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(ntext, "<|im_start|>assistant\n<think>\n\n</think>\n\n"))
	require.Len(t, next.Assistant, 1)
	span, err := m.Detokenize(next.Tokens[next.Assistant[0][0]:next.Assistant[0][1]])
	require.NoError(t, err)
	assert.Equal(t, "open cupboard<|im_end|>", span, "the think block is the template's, not the response's")

	// a Qwen3 answer's think block is never the action or the tip
	a, ok := rollout.ParseAction(pc, "<think>\nThe pot is in the cupboard.\n</think>\n\nopen cupboard")
	assert.True(t, ok)
	assert.Equal(t, "open cupboard", a)
	assert.Equal(t, "the pot was in the cupboard", rollout.CleanTip("<think>\n\n</think>\n\nthe pot was in the cupboard"))
}

func mustTok(t *testing.T, m *llama.Model, s string) []int32 {
	t.Helper()
	toks, err := m.Tokenize(s, false, false)
	require.NoError(t, err)
	return toks
}
