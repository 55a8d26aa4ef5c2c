package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/optim"
)

// Timing fields differ run to run, prompt_tokens_decoded counts KV-cache
// hits, which depend on what the process's cache held before (a resumed
// process starts empty), and max_rss_bytes is the process's peak RSS so far
// (getrusage), which depends on everything the process did before;
// everything else must be identical.
func stripTiming(ms []map[string]any) []map[string]any {
	for _, m := range ms {
		for k := range m {
			if k == "time" || k == "prompt_tokens_decoded" || k == "max_rss_bytes" || strings.HasPrefix(k, "t_") || strings.HasSuffix(k, "_per_s") {
				delete(m, k)
			}
		}
	}
	return ms
}

func fileBytes(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type memRow struct {
	NS, Content, Episode string
	Score                float64
	Step                 int64
}

func memRows(t testing.TB, dir string) []memRow {
	t.Helper()
	s, err := memstore.Open(filepath.Join(dir, MemoryFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es, err := s.List(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]memRow, len(es))
	for i, e := range es {
		out[i] = memRow{e.Namespace, e.Content, e.Episode, e.Score, e.Step}
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
	return out
}

// resumeSets: memory in every step (p = 1, q = 0.5, drawn per rollout) so
// that tips are written, retrieved and trained on both ways.
var resumeSets = []string{"mode.memory_prob=1", "mode.offpolicy_prob=0.5", "mode.per=rollout", "memory.threshold=0.01"}

// TestResumeEqualsUninterrupted: a run interrupted (context cancelled, as
// SIGINT does) after step 2 and resumed gives the same metrics, the same
// adapter bytes and the same memory as a run that never stopped.
func TestResumeEqualsUninterrupted(t *testing.T) {
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "empo2", 3, resumeSets...)
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := Train(context.Background(), RunOptions{Dir: ref, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithCancel(context.Background())
	res, err := Train(ctx, RunOptions{Dir: dir, Config: cfg, OnStep: func(m StepMetrics) {
		if m.Step == 2 {
			cancel()
		}
	}})
	if err != nil || !res.Interrupted || res.LastStep != 2 {
		t.Fatalf("interrupted run: %+v %v", res, err)
	}
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); !errors.Is(err, ErrRunExists) {
		t.Fatalf("second start without --resume: %v", err)
	}
	rc, err := LoadRunConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = Train(context.Background(), RunOptions{Dir: dir, Config: rc, Resume: true})
	if err != nil || res.FirstStep != 3 || res.LastStep != 3 {
		t.Fatalf("resume: %+v %v", res, err)
	}
	compareRuns(t, ref, dir, 3)
}

func compareRuns(t *testing.T, ref, dir string, last int) {
	t.Helper()
	a, b := stripTiming(readMetrics(t, ref)), stripTiming(readMetrics(t, dir))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("metrics differ:\nuninterrupted %v\nresumed       %v", a, b)
	}
	ck := filepath.Join(optim.CheckpointsDir, optim.CheckpointName(last), optim.AdapterFile)
	if string(fileBytes(t, filepath.Join(ref, ck))) != string(fileBytes(t, filepath.Join(dir, ck))) {
		t.Fatal("final adapters differ")
	}
	if ra, rb := memRows(t, ref), memRows(t, dir); !reflect.DeepEqual(ra, rb) {
		t.Fatalf("memories differ: %d vs %d entries", len(ra), len(rb))
	}
	checkEventFile(t, ref)
	checkEventFile(t, dir)
}

const killChildEnv = "EMPO2_TRAIN_KILL_CHILD"

// TestKillResume SIGKILLs training child processes and resumes: round 0
// kills itself right after step 2's tips and metrics are written and
// before its checkpoint (deterministic: the memory then holds tips of a
// step the checkpoint lacks); round 1 resumes and is killed by the parent
// at a random moment after step 3. The run loses at most the step in
// flight, and the final resume ends with the metrics, adapter and memory
// of a run that was never killed.
func TestKillResume(t *testing.T) {
	const steps = 5
	if dir := os.Getenv(killChildEnv); dir != "" {
		cfg := tinyRunConfig(t, os.Getenv(killChildEnv+"_MODEL"), "empo2", steps, resumeSets...)
		resume := os.Getenv(killChildEnv+"_ROUND") == "1"
		if resume {
			var err error
			if cfg, err = LoadRunConfig(dir, nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg, Resume: resume, OnStep: func(m StepMetrics) {
			fmt.Printf("step %d\n", m.Step)
			if !resume && m.Step == 2 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "empo2", steps, resumeSets...)
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := Train(context.Background(), RunOptions{Dir: ref, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(20261124, 1)) // fixed seed; the kill moment still varies with scheduling
	dir := filepath.Join(t.TempDir(), "run")
	for round := 0; round < 2; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillResume$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir, killChildEnv+"_MODEL="+model, fmt.Sprintf("%s_ROUND=%d", killChildEnv, round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		killed, seen := false, 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "step" {
				seen, _ = strconv.Atoi(f[1])
				if round == 1 && !killed && seen >= 3 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
					if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					killed = true
				}
			}
		}
		werr := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case round == 1 && werr == nil:
			// a fast machine finished the last steps within the random delay
			t.Logf("round 1: the child finished before the kill")
		case !errors.As(werr, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled():
			t.Fatalf("round %d: child was not killed: %v", round, werr)
		}
		info, ok, err := optim.LatestCheckpoint(dir)
		if err != nil || !ok {
			t.Fatalf("round %d: no checkpoint: %v", round, err)
		}
		s, err := memstore.Open(filepath.Join(dir, MemoryFile), nil)
		if err != nil {
			t.Fatal(err)
		}
		maxStep, _ := s.MaxStep(context.Background())
		s.Close()
		t.Logf("round %d: killed after step %d was reported; latest checkpoint step %d; memory holds tips up to step %d", round, seen, info.Step, maxStep)
		if info.Step < seen-1 {
			t.Fatalf("checkpoint %d: lost more than the step in flight (step %d was done)", info.Step, seen)
		}
		if round == 0 && (info.Step != 1 || maxStep != 2) {
			t.Fatalf("round 0 should die with checkpoint 1 and tips of step 2, got %d and %d", info.Step, maxStep)
		}
	}
	rc, err := LoadRunConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: rc, Resume: true}); err != nil {
		t.Fatal(err)
	}
	compareRuns(t, ref, dir, steps)
}
