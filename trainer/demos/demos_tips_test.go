package demos

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

func openTipMem(t *testing.T) *memstore.Store {
	t.Helper()
	m, err := memstore.Open(filepath.Join(t.TempDir(), "m.db"), memstore.NewHashEmbedder(memstore.DefaultDim))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
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
// demo's prompt at its step with a tip block and the demo's action as the
// answer; "fail" records never show the successful demo's tips; "all"
// records show it first at a step whose action the demo takes there for
// the first time (its own entry, or one under the same key: cosine 1,
// score 100, so first under OrderByScore); the retrieval keys are the rollout's (memoryKey); the
// same inputs give the same records.
func TestDemoTipRecords(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc := rollout.DefaultPromptConfig()
	cfg := DefaultTipRecordConfig()
	cfg.Prompt, cfg.Records, cfg.TopK, cfg.Threshold, cfg.Seed, cfg.FailureTips = pc, 6, 3, 0.9, 0, true
	var seenAll, seenFail int
	for v := range 4 {
		d, err := Explore(ctx, env, "textlab", "find-living-thing", v, 0)
		require.NoError(t, err)
		mem := openTipMem(t)
		recs, err := TipRecords(ctx, env, d, mem, cfg)
		require.NoError(t, err)
		require.NotEmpty(t, recs)
		all := recs
		// the failed attempts' tip turns come first, then the step records
		var failTips int
		for len(recs) > 0 && recs[0].Meta["failed"] == true {
			r := recs[0]
			recs = recs[1:]
			failTips++
			require.NoError(t, r.Check())
			n := r.Meta["steps"].(int)
			last := r.Messages[len(r.Messages)-1]
			require.Equal(t, sft.RoleAssistant, last.Role)
			require.True(t, strings.HasSuffix(r.Messages[len(r.Messages)-2].Content, rollout.TipRequest))
			// the attempt replays the demo's first actions: its tip turn's chat
			// starts like the demo's and its tip is not the demo's
			require.Equal(t, d.Desc, r.Messages[1].Content[len("Task: "):len("Task: ")+len(d.Desc)])
			assert.NotEqual(t, Tip(d), last.Content)
			assert.NotContains(t, last.Content, "The task is complete with score 100/100.")
			assert.Contains(t, last.Content, "/100")
			assert.Equal(t, 2*n+3, len(r.Messages), "system, task, n actions and observations, the tip")
		}
		require.Equal(t, 2, failTips, "DefaultTipRecordConfig: 2 failed attempts per demo")
		require.LessOrEqual(t, len(recs), cfg.Records)
		again, err := TipRecords(ctx, env, d, openTipMem(t), cfg)
		require.NoError(t, err)
		require.Equal(t, all, again, "same inputs, other records")

		success := rollout.TipContent(Tip(d), "", 100) // prefix up to the action
		success = success[:strings.Index(success, "(At this step")]
		keys := stepKeys(d)
		firstAt := map[string]int{}
		for i, s := range d.Steps {
			if _, ok := firstAt[s.Action]; !ok {
				firstAt[s.Action] = i
			}
		}
		steps := map[int]bool{}
		for _, r := range recs {
			require.NoError(t, r.Check())
			i := r.Meta["step"].(int) - 1
			require.False(t, steps[i], "step %d twice", i)
			steps[i] = true
			lines := tipLines(t, r.Messages[len(r.Messages)-2].Content)
			require.Equal(t, r.Meta["tips"], len(lines))
			require.LessOrEqual(t, len(lines), cfg.TopK)
			// the record without its tip block is the tip-free prompt of step i
			want := rollout.Messages(pc, d.Desc, d.FirstObs, d.Turns()[:i], "")
			got := r.Messages[:len(r.Messages)-1]
			require.Len(t, got, len(want))
			for k := range want {
				require.Equal(t, want[k].Role, got[k].Role)
				require.Equal(t, want[k].Content, rollout.StripTips(got[k].Content), "message %d", k)
			}
			last := r.Messages[len(r.Messages)-1]
			require.Equal(t, sft.RoleAssistant, last.Role)
			require.Equal(t, d.Steps[i].Action, last.Content)
			switch r.Meta["memory"] {
			case "fail":
				seenFail++
				for _, l := range lines {
					assert.NotContains(t, l, success, "a fail record shows the successful demo's tip")
				}
			case "all":
				seenAll++
				if firstAt[d.Steps[i].Action] == i {
					// its own entry, or one stored under the same key (the
					// observation after "teleport to R" is the same text each time)
					var cands []string
					for j, s := range d.Steps {
						if keys[j] == keys[i] && firstAt[s.Action] == j {
							cands = append(cands, rollout.TipContent(Tip(d), s.Action, 100))
						}
					}
					assert.Contains(t, cands, lines[0])
				}
			default:
				t.Fatalf("memory %v", r.Meta["memory"])
			}
		}
		// the store holds the demo's entries under its keys (memoryKey)
		ns := rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace()
		res, err := mem.RetrieveText(ctx, "all|"+ns, rollout.MemoryKey(d.Desc, d.FirstObs), memstore.Query{K: 1, Threshold: 0.999, Order: memstore.OrderBySimilarity})
		require.NoError(t, err)
		require.NotEmpty(t, res.Entries)
		assert.Contains(t, res.Entries[0].Content, "(At this step the action was \""+d.Steps[0].Action+"\"")
	}
	assert.Positive(t, seenAll)
	assert.Positive(t, seenFail)

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
