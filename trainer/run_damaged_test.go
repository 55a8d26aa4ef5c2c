package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/optim"
)

// copyTree copies the directory src to dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// treeBytes maps every file under dir to its bytes.
func treeBytes(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func diffTrees(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			d = append(d, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "+"+k)
		}
	}
	sort.Strings(d)
	return d
}

// TestResumeRefusesDamagedState: damaged run state is an error that names
// the file and says how to recover, and the refused resume writes nothing
// (never a silent restart, a silently dropped line or an empty memory).
func TestResumeRefusesDamagedState(t *testing.T) {
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "grpo", 3)
	base := filepath.Join(t.TempDir(), "base")
	if _, err := Train(context.Background(), RunOptions{Dir: base, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	ck := func(dir string, step int, f string) string {
		return filepath.Join(dir, optim.CheckpointsDir, optim.CheckpointName(step), f)
	}
	setStep := func(step int) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			p := ck(dir, 3, optim.CheckpointMeta)
			var m map[string]any
			json.Unmarshal(fileBytes(t, p), &m)
			m["step"] = step
			b, _ := json.Marshal(m)
			os.WriteFile(p, b, 0o644)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string
	}{
		{"no latest", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, optim.CheckpointsDir, optim.LatestFile)) },
			[]string{"latest", "step-000003"}},
		{"step 999", setStep(999), []string{optim.CheckpointMeta, "999"}},
		{"step -5", setStep(-5), []string{optim.CheckpointMeta, "-5"}},
		{"NaN moment", func(t *testing.T, dir string) {
			// a NaN written over the first value of a second moment
			p := ck(dir, 3, optim.StateFile)
			g, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			var at int64 = -1
			for _, ti := range g.Tensors {
				if strings.HasSuffix(ti.Name, ".adam_v") {
					at = int64(g.DataOffset + ti.Offset)
					break
				}
			}
			g.Close()
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil || at < 0 {
				t.Fatal(err, at)
			}
			var nan [4]byte
			binary.LittleEndian.PutUint32(nan[:], math.Float32bits(float32(math.NaN())))
			f.WriteAt(nan[:], at)
			f.Close()
		}, []string{optim.StateFile, "finite"}},
		{"corrupt metrics line", func(t *testing.T, dir string) {
			p := filepath.Join(dir, MetricsFile)
			lines := strings.SplitAfter(string(fileBytes(t, p)), "\n")
			lines[1] = `{"step": 2, "mode": "on-po` + "\n"
			os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644)
		}, []string{MetricsFile, "line 2"}},
		{"70 MB metrics line", func(t *testing.T, dir string) {
			p := filepath.Join(dir, MetricsFile)
			lines := strings.SplitAfter(string(fileBytes(t, p)), "\n")
			lines[1] = `{"step": 2, "junk": "` + strings.Repeat("x", 70<<20) + `"}` + "\n"
			os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644)
		}, []string{MetricsFile, "line 2"}},
		{"missing metrics line", func(t *testing.T, dir string) {
			p := filepath.Join(dir, MetricsFile)
			lines := strings.SplitAfter(string(fileBytes(t, p)), "\n")
			os.WriteFile(p, []byte(lines[0]+lines[2]), 0o644)
		}, []string{MetricsFile, "step 2"}},
		{"missing memory", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, MemoryFile)) }, []string{MemoryFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			copyTree(t, base, dir)
			tc.damage(t, dir)
			before := treeBytes(t, dir)
			rc, err := LoadRunConfig(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			rc.Steps = 4
			res, err := Train(context.Background(), RunOptions{Dir: dir, Config: rc, Resume: true})
			if err == nil {
				t.Fatalf("damaged run resumed: %+v", res)
			}
			for _, w := range append(tc.want, "recover") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "token too long") {
				t.Errorf("unclear error: %v", err)
			}
			if d := diffTrees(before, treeBytes(t, dir)); len(d) > 0 {
				t.Errorf("the refused resume changed %v", d)
			}
		})
	}
}

// TestResumeInvariantsInTrain: the rules of a resume hold for Go callers
// of Train, not only for the CLI: the model, env, tasks, seed and the
// adapter's shape cannot change, steps cannot fall below the checkpoint's,
// and a refused resume leaves config.yaml as it was.
func TestResumeInvariantsInTrain(t *testing.T) {
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "grpo", 2)
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	before := treeBytes(t, dir)
	other := filepath.Join(t.TempDir(), "other.gguf")
	os.WriteFile(other, fileBytes(t, model), 0o644)
	for _, tc := range []struct {
		change func(c *Config)
		want   string
	}{
		{func(c *Config) { c.Seed = 9 }, "seed"},
		{func(c *Config) { c.Env = "textlab" }, "env"},
		{func(c *Config) { c.Tasks = []string{"melt/0"} }, "tasks"},
		{func(c *Config) { c.LoRA.Rank = 4 }, "lora.rank"},
		{func(c *Config) { c.LoRA.Alpha = 1 }, "lora.alpha"},
		{func(c *Config) { c.LoRA.Targets = []string{"q", "v"} }, "lora.targets"},
		{func(c *Config) { c.Model = other }, "model"},
		{func(c *Config) { c.Steps = 1 }, "steps"},
	} {
		rc, err := LoadRunConfig(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		tc.change(&rc)
		_, err = Train(context.Background(), RunOptions{Dir: dir, Config: rc, Resume: true})
		if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("resume changing %s: %v", tc.want, err)
		}
		if d := diffTrees(before, treeBytes(t, dir)); len(d) > 0 {
			t.Fatalf("the refused resume (%s) changed %v", tc.want, d)
		}
	}
	// config.yaml edited by hand (issue 38): the error names the edit and
	// how to undo it, not damage of the checkpoint or of the model; an
	// emptied config.yaml is named as such
	cfgPath := filepath.Join(dir, ConfigFile)
	orig := fileBytes(t, cfgPath)
	changed := append(fileBytes(t, model), 0)
	os.WriteFile(other, changed, 0o644)
	for _, tc := range []struct {
		line, want string
	}{
		{"seed: 9", fmt.Sprintf("set seed: %d back in %s", cfg.Seed, cfgPath)},
		{"model: " + other, "set model: "},
	} {
		key := strings.SplitN(tc.line, ":", 2)[0]
		edited := regexp.MustCompile(`(?m)^`+key+`: .*$`).ReplaceAll(orig, []byte(tc.line))
		os.WriteFile(cfgPath, edited, 0o644)
		rc, err := LoadRunConfig(dir, nil)
		if err == nil {
			_, err = Train(context.Background(), RunOptions{Dir: dir, Config: rc, Resume: true})
		}
		if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "edited") {
			t.Errorf("config.yaml edited to %q: %v", tc.line, err)
		}
	}
	os.WriteFile(cfgPath, nil, 0o644)
	if _, err := LoadRunConfig(dir, nil); !errors.Is(err, ErrRunState) || !strings.Contains(err.Error(), "is empty") || !strings.Contains(err.Error(), cfgPath) {
		t.Errorf("empty config.yaml: %v", err)
	}
	os.WriteFile(cfgPath, orig, 0o644)
	// interrupted in the first step after the resume: the result names the
	// checkpoint the run stands at (the one it resumed from)
	rc, _ := LoadRunConfig(dir, nil)
	rc.Steps = 3
	ctx, cancel := context.WithCancel(context.Background())
	res, err := Train(ctx, RunOptions{Dir: dir, Config: rc, Resume: true, OnStart: func(int, int) { cancel() }})
	if err != nil || !res.Interrupted || !strings.HasSuffix(res.Checkpoint, optim.CheckpointName(2)) {
		t.Fatalf("interrupted first step after a resume: %+v %v", res, err)
	}
}

// TestTrainContextTooSmallForPrompt: a context (or a model's training
// context) too small for the first prompt fails before anything is
// created, naming the prompt's length and the context.
func TestTrainContextTooSmallForPrompt(t *testing.T) {
	model := testutil.ModelFile(t)
	cfg := tinyRunConfig(t, model, "grpo", 1)
	cfg.Context = 64
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg})
	if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "context 64") || !strings.Contains(err.Error(), "prompt") {
		t.Fatalf("context 64: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed start left %s: %v", dir, err)
	}
}
