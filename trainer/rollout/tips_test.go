package rollout

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/memstore"
)

func TestCleanTip(t *testing.T) {
	assert.Equal(t, "heat the water first", CleanTip("  \"heat the\n\twater   first\" "))
	assert.Equal(t, "a b", CleanTip("a "+TipsBegin+" b"+TipsEnd))
	assert.Equal(t, "", CleanTip(" \n "))
	assert.Equal(t, "a\uFFFDb", CleanTip("a\xffb"))
	assert.Contains(t, TipContent("t", "go\xfe", 1), "\"go\uFFFD\"")
	long := strings.Repeat("word ", 150)
	assert.Len(t, strings.Fields(CleanTip(long)), MaxTipWords)
	assert.Equal(t, "the pot is in the kitchen", CleanTip("<think>\nmaybe the stove?\n</think>\n\nthe pot is in the kitchen"), "a think block is not the tip")
	assert.Equal(t, "tip", CleanTip("reasoning the prompt opened</think> tip"))
	assert.Equal(t, "", CleanTip("<think> never closed, the limit came first"))
}

func TestEpisodeEntriesAndTipsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := memstore.Open(filepath.Join(t.TempDir(), "m.db"), memstore.NewHashEmbedder(0))
	require.NoError(t, err)
	defer s.Close()
	steps := []TipStep{
		{Context: "You are in the hallway. Doors lead to the kitchen and the greenhouse.", Action: "go to kitchen"},
		{Context: "You are in the kitchen. You see a stove, a sink and a pot.", Action: "pick up pot"},
		{Context: "You are in the kitchen. You hold a pot.", Action: "pick up pot"}, // same content: kept once
	}
	es := EpisodeEntries("  I found the pot but never turned on the stove; about halfway.\n", steps, 45, 12, "ep-9")
	require.Len(t, es, 3)
	assert.Equal(t, `I found the pot but never turned on the stove; about halfway. (At this step the action was "go to kitchen"; the episode ended with score 45/100.)`, es[0].Content)
	assert.Equal(t, 45.0, es[1].Score)
	assert.Equal(t, int64(12), es[2].Step)
	assert.Empty(t, EpisodeEntries("  ", steps, 45, 12, "ep-9"), "an empty tip stores nothing")
	n, err := s.Add(ctx, "boil/0", es)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	r, err := s.RetrieveText(ctx, "boil/0", "You are in the kitchen. You see a stove, a sink and a pot.", memstore.DefaultQuery())
	require.NoError(t, err)
	require.NotEmpty(t, r.Entries)
	assert.Contains(t, r.Entries[0].Content, "pick up pot")

	block := FormatTips(r.Entries)
	assert.True(t, strings.HasPrefix(block, TipsBegin+"\n"+TipsHeader+"\n- "))
	assert.True(t, strings.HasSuffix(block, "\n"+TipsEnd))
	assert.Equal(t, "", FormatTips(nil))

	prompt := "Task: boil water.\n\n" + block + "\nObservation: you are in the kitchen.\n"
	assert.Equal(t, "Task: boil water.\nObservation: you are in the kitchen.\n", StripTips(prompt))
	two := "a" + TipSep + block + "b" + TipSep + block + "c"
	assert.Equal(t, "abc", StripTips(two))
	assert.Equal(t, "no tips here", StripTips("no tips here"))
	assert.Equal(t, "head ", StripTips("head "+TipsBegin+" never closed"))
	assert.Equal(t, "x <memory > y", neutralize("x <memory> y"))
}

// ParseTipContent reads back what TipContent wrote — from the content and
// from a block line as FormatTips renders it — and refuses anything else.
func TestParseTipContent(t *testing.T) {
	for _, tc := range []struct {
		tip, action string
		score       float64
	}{
		{"I looked around the kitchen. The task is complete.", "teleport to kitchen", 100},
		{"a tip with (parentheses) and \"quotes\"", `say "hi" \ there`, -100},
		{"t", "move pea plant to red box", 12.5},
	} {
		c := TipContent(tc.tip, tc.action, tc.score)
		for _, s := range []string{c, strings.Split(FormatTips([]memstore.Match{{Entry: memstore.Entry{Content: c}}}), "\n")[2]} {
			tip, a, sc, ok := ParseTipContent(s)
			require.True(t, ok, s)
			assert.Equal(t, tc.tip, tip)
			assert.Equal(t, tc.action, a)
			assert.Equal(t, tc.score, sc)
		}
	}
	for _, s := range []string{"", "- just a tip", `x (At this step the action was "a"; the episode ended with score /100.)`, TipsHeader} {
		_, _, _, ok := ParseTipContent(s)
		assert.False(t, ok, s)
	}
}
