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
// A checkpoint is written into checkpoints/.tmp-step-000123, every file
// fsynced, then renamed into place and the directory fsynced; only then is
// `latest` replaced (temporary file, fsync, rename). A crash at any moment
// leaves `latest` naming a complete checkpoint (or no `latest` at all).
// Every random draw of a step derives from (seed, step) (see stepRNG), so a
// checkpoint needs no RNG state beyond its step number.
const (
	CheckpointsDir = "checkpoints"
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
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	name := CheckpointName(step)
	final := filepath.Join(root, name)
	tmp := filepath.Join(root, ".tmp-"+name)
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	a, err := u.Adapter()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := a.Write(filepath.Join(tmp, AdapterFile), gguf.TypeF32); err != nil {
		return "", fmt.Errorf("%w: adapter: %w", ErrCheckpoint, err)
	}
	if err := u.Save(filepath.Join(tmp, StateFile)); err != nil {
		return "", fmt.Errorf("%w: state: %w", ErrCheckpoint, err)
	}
	info := CheckpointInfo{Step: step, Updates: u.Step, Seed: seed, Time: time.Now().UTC()}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := writeFileSync(filepath.Join(tmp, CheckpointMeta), append(b, '\n')); err != nil {
		return "", err
	}
	if err := syncDir(tmp); err != nil {
		return "", err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := syncDir(root); err != nil {
		return "", err
	}
	if err := WriteFileAtomic(filepath.Join(root, LatestFile), []byte(name+"\n")); err != nil {
		return "", err
	}
	return final, pruneCheckpoints(root, keep)
}

// pruneCheckpoints removes all but the newest keep step-* directories and
// any leftover temporary directory.
func pruneCheckpoints(root string, keep int) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	var steps []int
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
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

// LatestCheckpoint reads `latest` of runDir; ok is false when the run has
// no checkpoint yet.
func LatestCheckpoint(runDir string) (info CheckpointInfo, ok bool, err error) {
	root := filepath.Join(runDir, CheckpointsDir)
	b, err := os.ReadFile(filepath.Join(root, LatestFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, false, nil
	}
	if err != nil {
		return info, false, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	name := strings.TrimSpace(string(b))
	if _, valid := parseCheckpointName(name); !valid {
		return info, false, fmt.Errorf("%w: %s names %q, not a checkpoint", ErrCheckpoint, filepath.Join(root, LatestFile), name)
	}
	dir := filepath.Join(root, name)
	mb, err := os.ReadFile(filepath.Join(dir, CheckpointMeta))
	if err != nil {
		return info, false, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := json.Unmarshal(mb, &info); err != nil {
		return info, false, fmt.Errorf("%w: %s: %w", ErrCheckpoint, filepath.Join(dir, CheckpointMeta), err)
	}
	info.Dir = dir
	return info, true, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory: write, fsync, rename, fsync of the directory.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return syncDir(filepath.Dir(path))
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: fsync %s: %w", ErrCheckpoint, dir, err)
	}
	return nil
}
