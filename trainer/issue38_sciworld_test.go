package trainer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/scienceworld"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/trainer/demos"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// Issue 38 §6's ScienceWorld cases on the stand-in gateway (the fake JVM of
// environments/scienceworld, see fakeScienceWorld): an odd first
// observation in explore demos, a memory that holds no tips for the
// evaluated variations, and a JVM that dies mid-rollout.

// powerVariations is the first n variations of power-component in split.
func powerVariations(t *testing.T, split environments.Split, n int) []int {
	t.Helper()
	tasks, err := scienceworld.Tasks(environments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.Name == "power-component" {
			vars, err := tk.VariationsIn(split)
			if err != nil || len(vars) < n {
				t.Fatalf("power-component %s variations %v: %v", split, vars, err)
			}
			return vars[:n]
		}
	}
	t.Fatal("no power-component task")
	return nil
}

// sciworldModel is a tiny model with a 4096-token context (ScienceWorld's
// first prompts are long).
func sciworldModel(t *testing.T) string {
	t.Helper()
	mcfg := modelgen.DefaultConfig()
	mcfg.Ctx = 4096
	model := filepath.Join(t.TempDir(), "tiny4k.gguf")
	if err := modelgen.Write(model, mcfg); err != nil {
		t.Fatal(err)
	}
	return model
}

// `env demos scienceworld --kind explore`: a variation that starts outside
// ("This outside location is called the outside.", variation 3 of
// power-component on the real jar, which aborted the whole command) is a
// room like any other and gives its demo; a variation whose first
// observation names no room at all is skipped with a warning naming it;
// neither aborts the demo file.
func TestScienceWorldExploreDemosOddVariations(t *testing.T) {
	sets := fakeScienceWorld(t)
	vars := powerVariations(t, environments.Train, 3)
	t.Setenv("FAKE_SCIENCEWORLD_OUTSIDE", strconv.Itoa(vars[1]))
	t.Setenv("FAKE_SCIENCEWORLD_NOROOM", strconv.Itoa(vars[2]))
	out := filepath.Join(t.TempDir(), "demos.jsonl")
	cfg, err := demos.LoadRunConfig("", append(sets, "env=scienceworld", "tasks=[power-component]", "split=train", "variations=3",
		"kind=explore", "env_options.simplifications=easy", "out="+out))
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	cfg.Warn = func(s string) { warns = append(warns, s) }
	res, err := demos.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("env demos aborted: %v (warnings %q)", err, warns)
	}
	if res.Episodes != 2 || res.Skipped != 1 || len(warns) != 1 {
		t.Fatalf("%d demos, %d skipped, warnings %q: want the hallway and the outside variations' demos and the roomless one skipped", res.Episodes, res.Skipped, warns)
	}
	want := regexp.MustCompile(fmt.Sprintf(`^skipped: task power-component variation %d: .*explore demos need a ScienceWorld-style first observation.*"You are floating somewhere\.`, vars[2]))
	if !want.MatchString(warns[0]) {
		t.Errorf("warning %q does not name the variation and its first observation", warns[0])
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// the outside variation's demo: its first observation, then a search
	// that teleports to the workshop and completes the task there
	for _, s := range []string{"This outside location is called the outside.", "teleport to workshop", "connect battery to red light bulb"} {
		if !strings.Contains(string(b), s) {
			t.Errorf("the demos lack %q", s)
		}
	}
	if n := strings.Count(string(b), "This outside location is called the outside."); n == 0 || strings.Contains(string(b), "You are floating somewhere") {
		t.Errorf("the demo file holds the roomless variation, or not the outside one (%d)", n)
	}
}

// `eval --memory both` on ScienceWorld variations for which the memory holds
// no entry (it holds the train split's tips; eval plays the test split)
// warns that memory on retrieves nothing, and still plays both arms.
func TestScienceWorldEvalMemoryCoverage(t *testing.T) {
	sets := fakeScienceWorld(t)
	train := powerVariations(t, environments.Train, 1)
	db := filepath.Join(t.TempDir(), "memory.db")
	emb, closeEmb, err := rollout.OpenEmbedder(rollout.DefaultMemoryConfig(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEmb()
	st, err := memstore.Open(db, emb)
	if err != nil {
		t.Fatal(err)
	}
	ns := rollout.Job{Task: "power-component", Variation: train[0]}.Namespace()
	if _, err := st.Add(context.Background(), ns, []memstore.Entry{{Key: "This room is called the hallway.",
		Content: "Teleport to the workshop, focus on the red light bulb, then connect the battery. Final score 100/100.", Score: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cfg, err := evaluate.LoadRunConfig("", append(sets, "model="+sciworldModel(t), "env=scienceworld", "tasks=[power-component]",
		"eval.memory=both", "memory_db="+db, "eval.episodes=1", "eval.max_variations=2", "parallel=2", "threads=1",
		"rollout.max_action_tokens=6", "rollout.step_limit=2"))
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	cfg.Warn = func(s string) { warns = append(warns, s) }
	res, err := evaluate.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range warns {
		if strings.Contains(w, "the memory "+db+" holds no tips for any of the 2 evaluated test variations") &&
			strings.Contains(w, "e.g. "+ns) && strings.Contains(w, "--split train") {
			found = true
		}
	}
	if !found {
		t.Errorf("no memory coverage warning: %q", warns)
	}
	if res.Report.MemoryOff == nil || res.Report.MemoryOn == nil || res.Report.MemoryOn.Episodes != 2 {
		t.Errorf("memory both: %+v", res.Report)
	}
}

// A JVM that dies mid-rollout (the fake JVM exits on its second step call:
// the episode's first action, after reset's look) ends its episode with end
// reason error, is logged naming the task and variation and that the JVM
// was replaced, and the replacement JVM plays on (it showed only as
// "error: 1" among the end reasons).
func TestScienceWorldDeadJVMLogged(t *testing.T) {
	sets := fakeScienceWorld(t)
	dir := t.TempDir()
	launches, died := filepath.Join(dir, "launches"), filepath.Join(dir, "died")
	t.Setenv("FAKE_SCIENCEWORLD_LAUNCHES", launches)
	t.Setenv("FAKE_SCIENCEWORLD_DIE", "2:"+died)
	var buf bytes.Buffer
	old := log.Logger
	log.Logger = zerolog.New(&buf)
	defer func() { log.Logger = old }()
	cfg, err := evaluate.LoadRunConfig("", append(sets, "model="+sciworldModel(t), "env=scienceworld", "tasks=[power-component]",
		"eval.episodes=3", "eval.max_variations=1", "parallel=2", "threads=1", "rollout.max_action_tokens=6", "rollout.step_limit=2"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := evaluate.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(died); err != nil {
		t.Fatalf("no JVM died: %v", err)
	}
	r := res.Report.MemoryOff
	if r == nil || r.Episodes != 3 || r.EndReasons[string(rollout.EndError)] != 1 {
		t.Fatalf("want 3 episodes, 1 ended by the dead JVM: %+v", r)
	}
	b, _ := os.ReadFile(launches)
	if n := strings.Count(string(b), "launch"); n != 3 {
		t.Errorf("%d JVM launches: want 2 and the dead one's replacement", n)
	}
	test := powerVariations(t, environments.Test, 1)
	out := buf.String()
	for _, s := range []string{"the environment died mid-episode", fmt.Sprintf(`"task":"power-component","variation":%d`, test[0]),
		"replaced by a new one (ScienceWorld: a new JVM)", "simulator process died"} {
		if !strings.Contains(out, s) {
			t.Errorf("the log lacks %q:\n%s", s, out)
		}
	}
}
