package optim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/runfiles"
)

// ErrCheckpoint: a checkpoint cannot be written, or the run directory's
// checkpoints are missing or damaged.
var ErrCheckpoint = errors.New("trainer: checkpoint")

// Checkpoint layout inside a run directory:
//
//	checkpoints/step-000123/adapter.gguf     the adapter (llama.cpp loads it: eval --lora, generate --lora)
//	checkpoints/step-000123/state.gguf       adapter + AdamW moments + update count (Save)
//	checkpoints/step-000123/checkpoint.json  {"step", "updates", "seed", "time"}
//	checkpoints/latest                       "step-000123\n": the newest complete checkpoint
//
// A checkpoint is written into a staging folder beside its final name
// (safefile.CreateDir), every file fsynced, then renamed into place and the
// directory fsynced; only then is `latest` replaced (safefile.WriteFile:
// temporary file, fsync, rename). A crash at any moment leaves `latest`
// naming a complete checkpoint (or no `latest` at all). Every random draw
// of a step derives from (seed, step) (see stepRNG), so a checkpoint needs
// no RNG state beyond its step number.
const (
	CheckpointsDir = runfiles.CheckpointsDir
	LatestFile     = "latest"
	AdapterFile    = "adapter.gguf"
	StateFile      = "state.gguf"
	CheckpointMeta = "checkpoint.json"
)

// CheckpointInfo is checkpoint.json.
type CheckpointInfo struct {
	Step    int       `json:"step"`    // training steps completed
	Updates int64     `json:"updates"` // optimizer steps completed
	Seed    int64     `json:"seed"`
	Time    time.Time `json:"time"`
	Dir     string    `json:"-"` // the checkpoint's directory
}

// CheckpointName is the directory name of step's checkpoint.
func CheckpointName(step int) string { return fmt.Sprintf("step-%06d", step) }

// WriteCheckpoint writes u's state as the checkpoint of step into runDir and
// points `latest` at it, then removes all but the newest keep checkpoints.
func WriteCheckpoint(runDir string, step int, seed int64, u *Updater, keep int) (string, error) {
	root := filepath.Join(runDir, CheckpointsDir)
	name := CheckpointName(step)
	final := filepath.Join(root, name)
	// A folder of this step left by a run that was resumed from an earlier
	// checkpoint is not `latest`'s: replaced as a whole.
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	d, err := safefile.CreateDir(final)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	defer d.Abort()
	a, err := u.Adapter()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := a.Write(filepath.Join(d.Path(), AdapterFile), gguf.TypeF32); err != nil {
		return "", fmt.Errorf("%w: adapter: %w", ErrCheckpoint, err)
	}
	if err := u.Save(filepath.Join(d.Path(), StateFile)); err != nil {
		return "", fmt.Errorf("%w: state: %w", ErrCheckpoint, err)
	}
	info := CheckpointInfo{Step: step, Updates: u.Step, Seed: seed, Time: time.Now().UTC()}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := os.WriteFile(filepath.Join(d.Path(), CheckpointMeta), append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := d.Commit(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := safefile.WriteFile(filepath.Join(root, LatestFile), []byte(name+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return final, pruneCheckpoints(root, keep)
}

// pruneCheckpoints removes all but the newest keep step-* directories and
// any staging folder left by a writer that died (the run's lock makes this
// process the only writer).
func pruneCheckpoints(root string, keep int) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	var steps []int
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
			continue
		}
		if n, ok := parseCheckpointName(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	for len(steps) > max(keep, 1) {
		if err := os.RemoveAll(filepath.Join(root, CheckpointName(steps[0]))); err != nil {
			return fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
		steps = steps[1:]
	}
	return nil
}

func parseCheckpointName(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "step-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// CheckpointSteps lists the steps of runDir's step-* checkpoint folders,
// ascending (none when there is no checkpoints folder).
func CheckpointSteps(runDir string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(runDir, CheckpointsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	var steps []int
	for _, e := range ents {
		if n, ok := parseCheckpointName(e.Name()); ok && e.IsDir() {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// LatestCheckpoint reads `latest` of runDir and the checkpoint.json it
// names; ok is false when the run has no `latest` yet. A checkpoint.json
// whose step is not its folder's is an error.
func LatestCheckpoint(runDir string) (info CheckpointInfo, ok bool, err error) {
	root := filepath.Join(runDir, CheckpointsDir)
	latest := filepath.Join(root, LatestFile)
	b, err := os.ReadFile(latest)
	if errors.Is(err, os.ErrNotExist) {
		return info, false, nil
	}
	if err != nil {
		return info, false, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	name := strings.TrimSpace(string(b))
	step, valid := parseCheckpointName(name)
	if !valid {
		return info, false, fmt.Errorf("%w: %s names %q, not a checkpoint", ErrCheckpoint, latest, name)
	}
	dir := filepath.Join(root, name)
	meta := filepath.Join(dir, CheckpointMeta)
	mb, err := os.ReadFile(meta)
	if err != nil {
		return info, false, fmt.Errorf("%w: %s names %s: %w", ErrCheckpoint, latest, name, err)
	}
	if err := json.Unmarshal(mb, &info); err != nil {
		return info, false, fmt.Errorf("%w: %s: %w", ErrCheckpoint, meta, err)
	}
	if info.Step != step {
		return info, false, fmt.Errorf("%w: %s says step %d, but it is the checkpoint of step %d (%s)", ErrCheckpoint, meta, info.Step, step, name)
	}
	info.Dir = dir
	return info, true, nil
}
