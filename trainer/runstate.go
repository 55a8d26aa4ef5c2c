package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer/optim"
)

// maxRecordLine bounds a line of metrics.jsonl or eval.jsonl: train
// writes a few KB per line, so a longer one is damage, not a record.
const maxRecordLine = 1 << 20

// checkResume checks, before anything is opened for writing, that the run
// in r.dir can be resumed with cfg: its marker, its config.yaml (what a
// resume may not change), the model it began with, its latest checkpoint
// and optimizer state, its memory, metrics and eval lines. It sets r.start
// and r.ckpt and returns the state to restore (nil without a checkpoint)
// and the model's identity.
func (r *run) checkResume(cfg *Config) (*optim.State, runfiles.ModelID, error) {
	var id runfiles.ModelID
	mark, err := runfiles.ReadRun(filepath.Join(r.dir, RunFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, id, fmt.Errorf("%w: %s has no %s: it is not a run that train made (or one from before empo2 wrote the marker), so it is not resumed and nothing in it is changed",
			ErrRunDir, r.dir, RunFile)
	}
	if err != nil {
		return nil, id, fmt.Errorf("%w: %w; recover: restore %s from a backup", ErrRunState, err, RunFile)
	}
	stored, err := LoadRunConfig(r.dir, nil)
	if err != nil {
		return nil, id, fmt.Errorf("%w: %s: %w; recover: restore %s from a backup (train wrote it when the run began)", ErrRunState, r.dir, err, ConfigFile)
	}
	if err := checkInvariants(cfg, &stored, filepath.Join(r.dir, ConfigFile)); err != nil {
		return nil, id, err
	}
	if id, err = runfiles.Fingerprint(cfg.Model); err != nil {
		return nil, id, fmt.Errorf("%w: the run's model %s: %w", ErrRunConfig, cfg.Model, err)
	}
	if (id.Size != mark.Model.Size || id.Fingerprint != mark.Model.Fingerprint) && mark.Model.Path != "" && id.Path != mark.Model.Path {
		return nil, id, fmt.Errorf("%w: the run's %s names model %s, but the run began on %s (%s): the config was edited after the run began, and a resume cannot change the model; recover: set model: %s back in %s",
			ErrRunConfig, ConfigFile, id.Path, mark.Model.Path, filepath.Join(r.dir, RunFile), mark.Model.Path, filepath.Join(r.dir, ConfigFile))
	}
	if id.Size != mark.Model.Size || id.Fingerprint != mark.Model.Fingerprint {
		return nil, id, fmt.Errorf("%w: model %s changed since the run began (%d bytes then, %d now; content fingerprint %s): a run resumes on the model it started with; put that file back",
			ErrRunConfig, cfg.Model, mark.Model.Size, id.Size, map[bool]string{true: "equal", false: "differs"}[id.Fingerprint == mark.Model.Fingerprint])
	}
	ckpts := filepath.Join(r.dir, optim.CheckpointsDir)
	earlier := fmt.Sprintf("point %s at an intact earlier checkpoint (echo step-NNNNNN > %s; the run replays the steps after it exactly)",
		filepath.Join(ckpts, optim.LatestFile), filepath.Join(ckpts, optim.LatestFile))
	info, ok, err := optim.LatestCheckpoint(r.dir)
	if err != nil {
		return nil, id, fmt.Errorf("%w: %w; recover: %s", ErrRunState, err, earlier)
	}
	steps, err := optim.CheckpointSteps(r.dir)
	if err != nil {
		return nil, id, err
	}
	var state *optim.State
	if !ok && len(steps) > 0 {
		newest := optim.CheckpointName(steps[len(steps)-1])
		return nil, id, fmt.Errorf("%w: %s is missing, but %s holds %s: the run's pointer to its last checkpoint is lost; recover: echo %s > %s (the newest complete checkpoint)",
			ErrRunState, filepath.Join(ckpts, optim.LatestFile), ckpts, newest, newest, filepath.Join(ckpts, optim.LatestFile))
	}
	if ok {
		if info.Seed != cfg.Seed {
			// checkInvariants made cfg's seed the stored config's: most
			// likely config.yaml was edited, not the checkpoint damaged.
			return nil, id, fmt.Errorf("%w: the run's %s says seed %d, but its checkpoint %s was trained with seed %d: a resume cannot change the seed, so %s was most likely edited after the run began; recover: set seed: %d back in %s (or, if the checkpoint is what was damaged, %s)",
				ErrRunConfig, ConfigFile, cfg.Seed, info.Dir, info.Seed, ConfigFile, info.Seed, filepath.Join(r.dir, ConfigFile), earlier)
		}
		if cfg.Steps < info.Step {
			return nil, id, fmt.Errorf("%w: steps %d is below the run's checkpoint (step %d, %s): a resume continues to steps ≥ %d",
				ErrRunConfig, cfg.Steps, info.Step, info.Dir, info.Step)
		}
		if state, err = optim.Load(filepath.Join(info.Dir, optim.StateFile)); err != nil {
			return nil, id, fmt.Errorf("%w: %w; recover: %s", ErrRunState, err, earlier)
		}
		r.start, r.ckpt = info.Step, info.Dir
	}
	recut := fmt.Sprintf("restore the file, or cut it before that line and %s", earlier)
	if r.keepMetrics, err = keptLines(filepath.Join(r.dir, MetricsFile), r.start, true); err != nil {
		return nil, id, fmt.Errorf("%w: %w; recover: %s", ErrRunState, err, recut)
	}
	if r.keepEval, err = keptLines(filepath.Join(r.dir, EvalFile), r.start, false); err != nil {
		return nil, id, fmt.Errorf("%w: %w; recover: %s", ErrRunState, err, recut)
	}
	if _, err := os.Stat(filepath.Join(r.dir, MemoryFile)); err != nil && r.start > 0 {
		return nil, id, fmt.Errorf("%w: %s: %w: the run's tips memory is gone, and the run cannot continue without the tips it trained with; recover: restore it from a backup, or start a new run from this one's weights (lora.init: %s)",
			ErrRunState, filepath.Join(r.dir, MemoryFile), err, filepath.Join(r.ckpt, optim.AdapterFile))
	}
	return state, id, nil
}

// checkInvariants refuses a resume that changes what the run is: its
// model, environment, tasks, seed and the adapter's shape.
func checkInvariants(cfg, stored *Config, file string) error {
	var diffs []string
	diff := func(key string, now, then any) {
		diffs = append(diffs, fmt.Sprintf("%s %v (the run's: %v)", key, now, then))
	}
	if cfg.Model != stored.Model {
		diff("model", cfg.Model, stored.Model)
	}
	if cfg.Env != stored.Env {
		diff("env", cfg.Env, stored.Env)
	}
	if !slices.Equal(cfg.Tasks, stored.Tasks) {
		diff("tasks", cfg.Tasks, stored.Tasks)
	}
	if cfg.Seed != stored.Seed {
		diff("seed", cfg.Seed, stored.Seed)
	}
	if cfg.LoRA.Rank != stored.LoRA.Rank {
		diff("lora.rank", cfg.LoRA.Rank, stored.LoRA.Rank)
	}
	if cfg.LoRA.Alpha != stored.LoRA.Alpha {
		diff("lora.alpha", cfg.LoRA.Alpha, stored.LoRA.Alpha)
	}
	if !slices.Equal(cfg.LoRA.Targets, stored.LoRA.Targets) {
		diff("lora.targets", cfg.LoRA.Targets, stored.LoRA.Targets)
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: a resume cannot change the run's model, env, tasks, seed or adapter shape: %s (see %s)",
			ErrRunConfig, strings.Join(diffs, "; "), file)
	}
	return nil
}

// keptLines reads a JSONL file of records with a "step" and returns the
// lines a resume from step keeps (those with step ≤ it), or nil when the
// file stays as it is. A torn last line (no newline: a kill during the
// write) is dropped; any other line that is not a record is an error
// naming it, and with contiguous the kept steps must be 1..step. A missing
// file holds no lines.
func keptLines(path string, step int, contiguous bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keep bytes.Buffer
	want := 1
	rest := b
	for n := 1; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break // torn last line
		}
		line := rest[:i]
		rest = rest[i+1:]
		if len(line) > maxRecordLine {
			return nil, fmt.Errorf("%s line %d is %d MB long: not a record train writes", path, n, len(line)>>20)
		}
		var s struct {
			Step *int `json:"step"`
		}
		if err := json.Unmarshal(line, &s); err != nil || s.Step == nil {
			if err == nil {
				err = errors.New(`no "step"`)
			}
			return nil, fmt.Errorf("%s line %d is not a record: %v", path, n, err)
		}
		if *s.Step > step {
			continue
		}
		if contiguous && *s.Step != want {
			return nil, fmt.Errorf("%s holds no line for step %d (line %d is step %d)", path, want, n, *s.Step)
		}
		want++
		keep.Write(line)
		keep.WriteByte('\n')
	}
	if contiguous && want-1 != step {
		return nil, fmt.Errorf("%s holds no line for step %d (the checkpoint is step %d)", path, want, step)
	}
	if bytes.Equal(keep.Bytes(), b) {
		return nil, nil
	}
	return append([]byte{}, keep.Bytes()...), nil
}

// rollBack removes every trace of the steps after the checkpoint: tips
// stamped later, and later metrics and eval lines.
func (r *run) rollBack(ctx context.Context) error {
	if _, err := r.store.DeleteAfterStep(ctx, int64(r.start)); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		keep []byte
	}{{MetricsFile, r.keepMetrics}, {EvalFile, r.keepEval}} {
		if f.keep != nil {
			if err := safefile.WriteFile(filepath.Join(r.dir, f.name), f.keep, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
