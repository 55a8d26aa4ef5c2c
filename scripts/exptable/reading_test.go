package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// The reading figures counted by hand on four memory-on steps and two
// control episodes.
func TestReading(t *testing.T) {
	block := func(es ...memstore.Match) string { return rollout.FormatTips(es) }
	m := func(a string, s float64) memstore.Match {
		return memstore.Match{Entry: memstore.Entry{Content: rollout.TipContent("a tip", a, s)}}
	}
	on := evaluate.Transcript{Setting: evaluate.MemoryOn, Trial: 2, Score: 10, FirstObs: "hall", Steps: []evaluate.TranscriptStep{
		{Tips: block(m("teleport to kitchen", 100), m("teleport to bedroom", 10)), Action: "teleport to kitchen"},       // room, copied
		{Tips: block(m("teleport to bedroom", 100)), Action: "teleport to hallway", Observation: textlab.UnknownAction}, // room, not copied; unknown
		{Tips: block(m("look around", 100), m("focus on frog", 100)), Action: "look around"},                            // two best actions: not a reading step
		{Tips: block(m("focus on frog", 10)), Action: "focus on frog"},                                                  // no success in the block
		{Tips: block(m("focus on frog", 100)), Action: "focus on frog"},                                                 // reading, copied, not a room
		{Action: "look around"}, // no block
	}}
	// trial 1 succeeded: from the hall it went to the kitchen, from the
	// kitchen (first visit) it looked around
	first := evaluate.Transcript{Setting: evaluate.MemoryOn, Trial: 1, Score: 100, FirstObs: "hall", Steps: []evaluate.TranscriptStep{
		{Action: "teleport to kitchen", Observation: "kitchen"}, {Action: "look around", Observation: "kitchen room"},
		{Action: "teleport to hall", Observation: "hall"}, {Action: "teleport to bedroom", Observation: "bedroom"}}}
	firstOff := first
	firstOff.Setting = evaluate.MemoryOff
	// the control repeats the kitchen once (trial 2), not the second time
	// (trial 3); its other steps meet no room choice of trial 1
	ctl2 := evaluate.Transcript{Setting: evaluate.MemoryOff, Trial: 2, Score: 40, FirstObs: "hall", Steps: []evaluate.TranscriptStep{
		{Action: "teleport to kitchen", Observation: "kitchen"}, {Action: "teleport to hall", Observation: "elsewhere"}}}
	ctl3 := evaluate.Transcript{Setting: evaluate.MemoryOff, Trial: 3, Score: 60, FirstObs: "hall", Steps: []evaluate.TranscriptStep{
		{Action: "blue box", Observation: textlab.UnknownAction}}} // at the hall: not trial 1's room; unknown
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, tr := range []evaluate.Transcript{first, firstOff, on, ctl2, ctl3} {
		require.NoError(t, enc.Encode(tr))
	}
	p := filepath.Join(t.TempDir(), "eps.jsonl")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	st, err := loadReading(p)
	require.NoError(t, err)
	assert.Equal(t, 10, st.Steps, "trial 1's four and trial 2's six, memory on")
	assert.Equal(t, 5, st.Blocks)
	assert.Equal(t, 3, st.Reading)
	assert.Equal(t, 2, st.Copied)
	assert.Equal(t, 2, st.Rooms)
	assert.Equal(t, 1, st.RoomsCopied)
	assert.Equal(t, 10.0, st.OnLater, "trial 1 is not counted")
	assert.Equal(t, 50.0, st.OffLater)
	assert.Equal(t, 2, st.CtlRooms, "the hall twice; the kitchen's look around is no room choice")
	assert.Equal(t, 1, st.CtlRepeated)
	assert.Equal(t, 1, st.OnRooms, "memory on, trial 2: the hall once (its other observations are not trial 1's)")
	assert.Equal(t, 1, st.OnRepeated)
	assert.Equal(t, 6, st.OnLaterSteps, "trial 2's six, memory on")
	assert.Equal(t, 1, st.OnUnknown)
	assert.Equal(t, 3, st.CtlLaterSteps, "trials 2 and 3 of the control")
	assert.Equal(t, 1, st.CtlUnknown)
	var out bytes.Buffer
	writeReading(&out, []*readingStats{st})
	assert.Contains(t, out.String(), "| eps.jsonl | 10.0 | 50.0 | 5 of 10 steps | 3 | 2/3 (67 %) | 2 | 1/2 (50 %) | 1/1 (100 %) | 1/2 (50 %) | +50 | 1/6 (17 %) | 1/3 (33 %) |")
}
