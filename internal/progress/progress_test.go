package progress

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFile(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want ErrNotExist", err)
	}
	want := Progress{Step: 3, Phase: PhaseRollouts, EpisodesDone: 5, EpisodesTotal: 16,
		TokensPerS: 123.5, ETAStepS: 40, ETARunS: 400, Time: time.Unix(1700000000, 0).UTC()}
	if err := WriteFile(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(want.Time) {
		t.Fatalf("time %v, want %v", got.Time, want.Time)
	}
	got.Time = want.Time
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// A zero Time is filled in; the field names are the file format.
	if err := WriteFile(dir, Progress{Step: 1, Phase: PhaseUpdate}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(Path(dir))
	for _, k := range []string{`"step":1`, `"phase":"update"`, `"episodes_done"`, `"episodes_total"`,
		`"tokens_per_s"`, `"eta_step_s"`, `"eta_run_s"`, `"time"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("file %s lacks %s", b, k)
		}
	}
	if p, _ := ReadFile(dir); p.Time.IsZero() || time.Since(p.Time) > time.Minute {
		t.Errorf("time not set to now: %v", p.Time)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want only %s", len(ents), FileName)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

// A reader racing writers always sees a whole file.
func TestConcurrentReadersSeeWholeFiles(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(dir, Progress{Step: 1, Phase: PhaseRollouts}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			if err := WriteFile(dir, Progress{Step: 1, Phase: PhaseRollouts, EpisodesDone: i, EpisodesTotal: 200}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 200 {
		if _, err := ReadFile(dir); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
