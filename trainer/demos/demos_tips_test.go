package demos

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

func openTipMem(t *testing.T) *memstore.Store {
	t.Helper()
	m, err := memstore.Open(filepath.Join(t.TempDir(), "m.db"), tipEmbedder())
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// tipEmbedder embeds as the trainer's default memory does (rollout.OpenEmbedder).
func tipEmbedder() *memstore.HashEmbedder {
	return memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(rollout.DefaultKeyPieces)
}

// tipEntry is a memory entry as the test recomputes it.
type tipEntry struct {
	key, content string
	score        float64
}

// episodeEntries recomputes an episode's entries from its chat (system,
// task, actions and observations): every step's content under the final
// conversation, as WriteTips stores them.
func episodeEntries(msgs []llama.Message, tip string, score float64) []tipEntry {
	key := rollout.ConversationKey(msgs)
	var out []tipEntry
	for _, m := range msgs {
		if m.Role == sft.RoleAssistant {
			out = append(out, tipEntry{key, rollout.TipContent(tip, m.Content, score), score})
		}
	}
	return out
}

// wantTips recomputes a retrieval from scratch: the entries (deduplicated
// by content, first kept) whose key's cosine with query exceeds thr, by
// score, ties in insertion order, the first k, as a tip block.
func wantTips(t *testing.T, ents []tipEntry, query string, k int, thr float64) string {
	t.Helper()
	ctx := context.Background()
	texts := []string{query}
	var uniq []tipEntry
	seen := map[string]bool{}
	for _, e := range ents {
		if !seen[e.content] {
			seen[e.content] = true
			uniq = append(uniq, e)
			texts = append(texts, e.key)
		}
	}
	vs, err := tipEmbedder().Embed(ctx, texts)
	require.NoError(t, err)
	var hits []memstore.Match
	for i, e := range uniq {
		var c float32
		for d := range vs[0] {
			c += vs[0][d] * vs[i+1][d]
		}
		if c > float32(thr) {
			hits = append(hits, memstore.Match{Entry: memstore.Entry{Content: e.content, Score: e.score}})
		}
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].Score > hits[b].Score })
	return rollout.FormatTips(hits[:min(k, len(hits))])
}

// tipLines are the "- content" lines of the tip block that ends a user message.
func tipLines(t *testing.T, user string) []string {
	t.Helper()
	i := strings.LastIndex(user, rollout.TipSep+rollout.TipsBegin)
	require.GreaterOrEqual(t, i, 0, "no tip block in %q", user)
	block := user[i+len(rollout.TipSep):]
	require.True(t, strings.HasSuffix(block, rollout.TipsEnd))
	lines := strings.Split(block, "\n")
	require.Equal(t, rollout.TipsHeader, lines[1])
	var out []string
	for _, l := range lines[2 : len(lines)-1] {
		require.True(t, strings.HasPrefix(l, "- "), l)
		out = append(out, strings.TrimPrefix(l, "- "))
	}
	return out
}

// A failed attempt replays the demo's prefix exactly, then random valid
// actions; it is deterministic given the rng.
func TestFailedAttempt(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 2, 0)
	require.NoError(t, err)
	require.Greater(t, len(d.Steps), 6)
	for _, prefix := range []int{0, 3, len(d.Steps) - 1} {
		f, err := FailedAttempt(ctx, env, d, prefix, 5, 0, rand.New(rand.NewPCG(1, uint64(prefix))))
		require.NoError(t, err)
		g, err := FailedAttempt(ctx, env, d, prefix, 5, 0, rand.New(rand.NewPCG(1, uint64(prefix))))
		require.NoError(t, err)
		assert.Equal(t, f.Actions(), g.Actions(), "not deterministic")
		require.GreaterOrEqual(t, len(f.Steps), prefix)
		assert.LessOrEqual(t, len(f.Steps), prefix+5)
		assert.Equal(t, d.Actions()[:prefix], f.Actions()[:prefix])
		for i := range prefix {
			assert.Equal(t, d.Steps[i].Observation, f.Steps[i].Observation)
		}
		assert.Equal(t, d.Desc, f.Desc)
		assert.Equal(t, d.FirstObs, f.FirstObs)
	}
}

// TipRecords, checked against a recomputation: each record is the
// demo's prompt at its step with the tips the rollout would show, in every
// user message up to it (memory.tips_in every-turn) or only the last, and
// the demo's action as the answer; the tips are recomputed from scratch
// from the failed attempts' tip turns and the demo (entries under each
// episode's final conversation, cosine above the threshold with the
// conversation before the step, by score with ties oldest first, the top
// K): "fail" records never show the successful demo, "all" records show
// its entries first and in step order; the same inputs give the same
// records.
func TestDemoTipRecords(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc := rollout.DefaultPromptConfig()
	for _, tipsIn := range []rollout.TipsIn{rollout.TipsEveryTurn, rollout.TipsLastTurn} {
		cfg := DefaultTipRecordConfig()
		cfg.Prompt, cfg.Records, cfg.TopK, cfg.Threshold, cfg.Seed, cfg.FailureTips, cfg.TipsIn = pc, 6, 3, 0.5, 0, true, tipsIn
		var seenAll, seenFail, multi int
		for v := range 4 {
			d, err := Explore(ctx, env, "textlab", "find-living-thing", v, 0)
			require.NoError(t, err)
			mem := openTipMem(t)
			recs, err := TipRecords(ctx, env, d, mem, cfg)
			require.NoError(t, err)
			require.NotEmpty(t, recs)
			all := recs
			// the failed attempts' tip turns come first, then the step records
			var fails []tipEntry
			var failTips int
			for len(recs) > 0 && recs[0].Meta["failed"] == true {
				r := recs[0]
				recs = recs[1:]
				failTips++
				require.NoError(t, r.Check())
				n := r.Meta["steps"].(int)
				last := r.Messages[len(r.Messages)-1]
				require.Equal(t, sft.RoleAssistant, last.Role)
				for i, m := range r.Messages {
					// the attempt's actions (random ones among them) are context: only the tip is trained
					require.Equal(t, m.Role == sft.RoleAssistant && i < len(r.Messages)-1, r.IsContext(i), "message %d", i)
				}
				require.Equal(t, rollout.TipRequest, r.Messages[len(r.Messages)-2].Content, "the tip request is a user turn of its own")
				// the attempt replays the demo's first actions: its tip turn's chat
				// starts like the demo's and its tip is not the demo's
				require.Equal(t, d.Desc, r.Messages[1].Content[len("Task: "):len("Task: ")+len(d.Desc)])
				assert.NotEqual(t, Tip(d), last.Content)
				assert.NotContains(t, last.Content, "The task is complete.")
				assert.Regexp(t, `The (task is not complete|episode failed)\.$`, last.Content)
				assert.Equal(t, 2*n+4, len(r.Messages), "system, task, n actions and observations, the request, the tip")
				fails = append(fails, episodeEntries(r.Messages[:len(r.Messages)-2], last.Content, r.Meta["score"].(float64))...)
			}
			require.Equal(t, 2, failTips, "DefaultTipRecordConfig: 2 failed attempts per demo")
			require.LessOrEqual(t, len(recs), cfg.Records)
			again, err := TipRecords(ctx, env, d, openTipMem(t), cfg)
			require.NoError(t, err)
			require.Equal(t, all, again, "same inputs, other records")

			demoMsgs := rollout.Messages(pc, d.Desc, d.FirstObs, d.Turns(), "")
			demo := episodeEntries(demoMsgs, Tip(d), d.Score)
			spaces := map[string][]tipEntry{"fail": fails, "all": append(append([]tipEntry(nil), fails...), demo...)}
			steps := map[int]bool{}
			for _, r := range recs {
				require.NoError(t, r.Check())
				i := r.Meta["step"].(int) - 1
				require.False(t, steps[i], "step %d twice", i)
				steps[i] = true
				space := r.Meta["memory"].(string)
				require.Contains(t, spaces, space)
				// the record without its tips is the tip-free prompt of step i
				want := rollout.Messages(pc, d.Desc, d.FirstObs, d.Turns()[:i], "")
				got := r.Messages[:len(r.Messages)-1]
				require.Len(t, got, len(want))
				users := 0
				for k := range want {
					require.Equal(t, want[k].Role, got[k].Role)
					require.Equal(t, want[k].Content, rollout.StripTips(got[k].Content), "message %d", k)
					if want[k].Role != "user" {
						continue
					}
					// user message k answers step `users`: its tips are those of that step's key
					block := ""
					if users == i || tipsIn == rollout.TipsEveryTurn {
						query := rollout.ConversationKey(rollout.Messages(pc, d.Desc, d.FirstObs, d.Turns()[:users], ""))
						block = wantTips(t, spaces[space], query, cfg.TopK, cfg.Threshold)
					}
					wantContent := want[k].Content
					if block != "" {
						wantContent += rollout.TipSep + block
					}
					require.Equal(t, wantContent, got[k].Content, "step %d, user message %d (%s)", i, users, space)
					users++
				}
				if i > 0 && tipsIn == rollout.TipsEveryTurn {
					multi++
				}
				lines := tipLines(t, got[len(got)-1].Content)
				require.Equal(t, r.Meta["tips"], len(lines))
				last := r.Messages[len(r.Messages)-1]
				require.Equal(t, sft.RoleAssistant, last.Role)
				require.Nil(t, r.Context, "a step record trains its demo's actions")
				require.Equal(t, d.Steps[i].Action, last.Content)
				switch space {
				case "fail":
					seenFail++
					for _, l := range lines {
						assert.NotContains(t, l, "score 100/100", "a fail record shows the successful demo's tip")
					}
				case "all":
					seenAll++
					assert.Equal(t, demo[0].content, lines[0], "the best episode's first step comes first")
				}
			}
		}
		assert.Positive(t, seenAll)
		assert.Positive(t, seenFail)
		if tipsIn == rollout.TipsEveryTurn {
			assert.Positive(t, multi, "records with tips in several turns")
		}
	}

	// refusals
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 0, 0)
	require.NoError(t, err)
	last := pc
	last.History = rollout.HistoryLast
	for _, edit := range []func(*TipRecordConfig){
		func(c *TipRecordConfig) { c.Records = -1 },
		func(c *TipRecordConfig) { c.Records, c.Threshold = 2, 1.5 },
		func(c *TipRecordConfig) { c.Records, c.Prompt = 2, last },
		func(c *TipRecordConfig) { c.Records, c.Failures = 2, 0 },
		func(c *TipRecordConfig) { c.Records, c.TopK = 2, 0 },
		func(c *TipRecordConfig) { c.FailureTips = true },
	} {
		bad := DefaultTipRecordConfig()
		edit(&bad)
		_, err := TipRecords(ctx, env, d, openTipMem(t), bad)
		require.ErrorIs(t, err, ErrDemo, "%+v", bad)
	}
}
