package memstore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCleanTip(t *testing.T) {
	assert.Equal(t, "heat the water first", CleanTip("  \"heat the\n\twater   first\" "))
	assert.Equal(t, "a b", CleanTip("a "+TipsBegin+" b"+TipsEnd))
	assert.Equal(t, "", CleanTip(" \n "))
	long := strings.Repeat("word ", 150)
	assert.Len(t, strings.Fields(CleanTip(long)), MaxTipWords)
}

func TestEpisodeEntriesAndTipsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "m.db"), NewHashEmbedder(0))
	steps := []Step{
		{Context: "You are in the hallway. Doors lead to the kitchen and the greenhouse.", Action: "go to kitchen"},
		{Context: "You are in the kitchen. You see a stove, a sink and a pot.", Action: "pick up pot"},
		{Context: "You are in the kitchen. You hold a pot.", Action: "pick up pot"}, // same content: kept once
	}
	es := EpisodeEntries("  I found the pot but never turned on the stove; about halfway.\n", steps, 45, 12, "ep-9")
	require.Len(t, es, 3)
	assert.Equal(t, `I found the pot but never turned on the stove; about halfway. (At this step the action was "go to kitchen"; the episode ended with score 45/100.)`, es[0].Content)
	assert.Equal(t, 45.0, es[1].Score)
	assert.Equal(t, int64(12), es[2].Step)
	n, err := s.Add(ctx, "boil/0", es)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	r, err := s.RetrieveText(ctx, "boil/0", "You are in the kitchen. You see a stove, a sink and a pot.", Query{})
	require.NoError(t, err)
	require.NotEmpty(t, r.Entries)
	assert.Contains(t, r.Entries[0].Content, "pick up pot")

	block := FormatTips(r.Entries)
	assert.True(t, strings.HasPrefix(block, TipsBegin+"\n"+TipsHeader+"\n- "))
	assert.True(t, strings.HasSuffix(block, TipsEnd+"\n"))
	assert.Equal(t, "", FormatTips(nil))

	prompt := "Task: boil water.\n" + block + "Observation: you are in the kitchen.\n"
	assert.Equal(t, "Task: boil water.\nObservation: you are in the kitchen.\n", StripTips(prompt))
	two := "a\n" + block + "b\n" + block + "c"
	assert.Equal(t, "a\nb\nc", StripTips(two))
	assert.Equal(t, "no tips here", StripTips("no tips here"))
	assert.Equal(t, "head ", StripTips("head "+TipsBegin+" never closed"))
}
