package optim

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckpointLatestAndKeep(t *testing.T) {
	pol := newFakePolicy()
	u, err := NewUpdater(pol, fakeConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, ok, err := LatestCheckpoint(dir); ok || err != nil {
		t.Fatalf("empty run: %v %v", ok, err)
	}
	for step := 1; step <= 4; step++ {
		u.Step = int64(step * 2)
		if _, err := WriteCheckpoint(dir, step, 7, u, 2); err != nil {
			t.Fatal(err)
		}
	}
	info, ok, err := LatestCheckpoint(dir)
	if err != nil || !ok || info.Step != 4 || info.Updates != 8 || info.Seed != 7 {
		t.Fatalf("latest = %+v %v %v", info, ok, err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, CheckpointsDir))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 3 || names[0] != LatestFile || names[1] != "step-000003" || names[2] != "step-000004" {
		t.Fatalf("checkpoints/ = %v", names)
	}
	s, err := Load(filepath.Join(info.Dir, StateFile))
	if err != nil || s.Step != 8 {
		t.Fatalf("state: %v %v", s, err)
	}
}

// TestCheckpointDamaged: a checkpoint.json whose step is not its folder's
// is an error naming the file; a state with a non-finite moment is neither
// saved nor loaded.
func TestCheckpointDamaged(t *testing.T) {
	u, err := NewUpdater(newFakePolicy(), fakeConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := WriteCheckpoint(dir, 3, 7, u, 2)
	if err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(p, CheckpointMeta)
	good, _ := os.ReadFile(meta)
	for _, step := range []string{"999", "-5"} {
		os.WriteFile(meta, []byte(strings.Replace(string(good), `"step": 3`, `"step": `+step, 1)), 0o644)
		if _, _, err := LatestCheckpoint(dir); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), CheckpointMeta) || !strings.Contains(err.Error(), step) {
			t.Errorf("step %s: %v", step, err)
		}
	}
	s, err := u.State()
	if err != nil {
		t.Fatal(err)
	}
	s.Opt.V[0][1] = float32(math.NaN())
	if err := Save(filepath.Join(dir, "bad.gguf"), s); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "finite") {
		t.Fatalf("saving a NaN moment: %v", err)
	}
	s.Opt.V[0][1] = -1
	if err := Save(filepath.Join(dir, "bad.gguf"), s); !errors.Is(err, ErrState) {
		t.Fatalf("saving a negative second moment: %v", err)
	}
}
