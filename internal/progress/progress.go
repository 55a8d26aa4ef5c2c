// Package progress is the file a training run keeps up to date with the step
// in progress: RUN_DIR/progress.json, replaced atomically (a temporary file
// renamed over it) every time the trainer moves on, and read by the live
// dashboard (`empo2 report --serve`). It is a leaf: the standard library only.
//
// The file is a hint for watchers, not a record: it is not fsynced, a run
// killed mid-step leaves its last state behind (Time says how old it is), and
// metrics.jsonl stays the truth about finished steps.
package progress

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FileName is the progress file's name inside a run directory.
const FileName = "progress.json"

// Phases of a training step, in the order a step goes through them.
const (
	PhaseRollouts   = "rollouts"   // episodes being played
	PhaseTips       = "tips"       // tips being written into memory
	PhaseOldLogp    = "old_logp"   // π_old log-probabilities of the batch
	PhaseUpdate     = "update"     // the gradient update
	PhaseEval       = "eval"       // an eval pass
	PhaseCheckpoint = "checkpoint" // the checkpoint being written
	PhaseDone       = "done"       // the run finished
)

// Phases lists every phase a Progress may hold.
var Phases = []string{PhaseRollouts, PhaseTips, PhaseOldLogp, PhaseUpdate, PhaseEval, PhaseCheckpoint, PhaseDone}

// Progress is the step in progress. Step is the training step being made
// (1-based, the step metrics.jsonl will record when it ends); zero-valued
// rates and ETAs mean "not known yet".
type Progress struct {
	Step          int       `json:"step"`
	Phase         string    `json:"phase"`
	EpisodesDone  int       `json:"episodes_done"`
	EpisodesTotal int       `json:"episodes_total"`
	TokensPerS    float64   `json:"tokens_per_s"`
	ETAStepS      float64   `json:"eta_step_s"`
	ETARunS       float64   `json:"eta_run_s"`
	Time          time.Time `json:"time"`
}

// Path is dir's progress file.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// WriteFile replaces dir's progress.json with p (Time set to now when zero):
// the JSON goes to a temporary file in dir that is renamed over the old one,
// so a reader sees the old file or the new one, never half of one.
func WriteFile(dir string, p Progress) error {
	if p.Time.IsZero() {
		p.Time = time.Now()
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+FileName+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, Path(dir))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("progress: %w", err)
	}
	return nil
}

// ReadFile reads dir's progress.json. A missing file is an error that
// errors.Is(err, fs.ErrNotExist) recognises.
func ReadFile(dir string) (Progress, error) {
	var p Progress
	b, err := os.ReadFile(Path(dir))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("progress: %s: %w", Path(dir), err)
	}
	return p, nil
}

// Remove deletes dir's progress.json; a missing file is not an error.
func Remove(dir string) error {
	if err := os.Remove(Path(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
