package evaluate

// Transcripts: every episode an evaluation played, as JSON Lines
// (RunConfig.EpisodesOut, `empo2 eval --episodes-out FILE`), so that what
// the policy saw and did — its tip blocks included — can be read after the
// numbers.

import (
	"bytes"
	"encoding/json"

	"github.com/empo2/empo2/trainer/rollout"
)

// Transcript is one played episode (one JSON line).
type Transcript struct {
	Setting   MemorySetting    `json:"setting"`         // on or off
	Trial     int              `json:"trial,omitempty"` // ood: 1-based trial
	Task      string           `json:"task"`
	Variation int              `json:"variation"`
	Seed      int64            `json:"seed"`
	Score     float64          `json:"score"`
	Success   bool             `json:"success"`
	End       rollout.End      `json:"end"`
	TaskDesc  string           `json:"task_desc"`
	FirstObs  string           `json:"first_observation"`
	Steps     []TranscriptStep `json:"steps"`
	Tip       string           `json:"tip,omitempty"` // the tip the episode wrote (ood memory trials)
}

// TranscriptStep is one action of a Transcript.
type TranscriptStep struct {
	Tips        string  `json:"tips,omitempty"` // the block shown before the action
	Text        string  `json:"text"`           // the policy's response
	Action      string  `json:"action"`         // what the environment received
	Observation string  `json:"observation"`    // what it answered
	Reward      float64 `json:"reward"`
}

// transcriptLines appends eps to buf as JSON lines.
func transcriptLines(buf *bytes.Buffer, setting MemorySetting, trial int, eps []rollout.Episode) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	for i := range eps {
		ep := &eps[i]
		t := Transcript{Setting: setting, Trial: trial, Task: ep.Task, Variation: ep.Variation, Seed: ep.Seed,
			Score: ep.Score, Success: ep.Success, End: ep.End, TaskDesc: ep.TaskDesc, FirstObs: ep.FirstObs, Tip: ep.Tip,
			Steps: make([]TranscriptStep, len(ep.Steps))}
		for j, s := range ep.Steps {
			t.Steps[j] = TranscriptStep{Tips: s.Tips, Text: s.Text, Action: s.Action, Observation: s.Observation, Reward: s.Reward}
		}
		if err := enc.Encode(t); err != nil {
			return err
		}
	}
	return nil
}
