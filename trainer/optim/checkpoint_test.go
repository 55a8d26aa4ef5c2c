package optim

import (
	"os"
	"path/filepath"
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
