package demos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
	"github.com/empo2/empo2/trainer/sft"
)

// A deviating attempt replays the demo's prefix, then takes another
// action than the demo's at the prefix step.
func TestDeviatingAttempt(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 2, 0)
	require.NoError(t, err)
	for _, p := range []int{0, 3, len(d.Steps) - 1} {
		f, err := DeviatingAttempt(ctx, env, d, p, 4, 0, rand.New(rand.NewPCG(3, uint64(p))))
		require.NoError(t, err)
		require.Greater(t, len(f.Steps), p)
		assert.LessOrEqual(t, len(f.Steps), p+4)
		assert.Equal(t, d.Actions()[:p], f.Actions()[:p])
		assert.NotEqual(t, d.Steps[p].Action, f.Steps[p].Action, "prefix %d", p)
	}
}

// TestReadRecordsPromptIsTheRollouts: the prompt a read record is built
// with (memoryPrompt) is the one the rollout renders for the same memory
// state. A memory holds a demo's and a deviating attempt's entries as
// ReadRecords stores them; a Roller plays the demo's variation with memory
// on; memoryPrompt, given that episode's own turns and the same memory,
// renders every step's prompt as the rollout did (text equal after the
// chat template), under both keys and both tip placements.
func TestReadRecordsPromptIsTheRollouts(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 1, 0)
	require.NoError(t, err)
	m := testutil.Model(t)
	pc := rollout.DefaultPromptConfig()
	for _, tc := range []struct {
		key    rollout.KeyKind
		thr    float64
		tipsIn rollout.TipsIn
	}{
		{rollout.KeyObservation, 0.5, rollout.TipsLastTurn},
		{rollout.KeyObservation, 0.5, rollout.TipsEveryTurn},
		{rollout.KeyConversation, 0.5, rollout.TipsEveryTurn},
	} {
		mem := openTipMem(t)
		ns := rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace()
		f, err := DeviatingAttempt(ctx, env, d, 0, 5, 0, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err)
		_, err = mem.Add(ctx, ns, demoEntries(pc, tc.key, f, "dev"))
		require.NoError(t, err)
		_, err = mem.Add(ctx, ns, demoEntries(pc, tc.key, d, "demo"))
		require.NoError(t, err)
		mc := rollout.DefaultMemoryConfig()
		mc.Key, mc.Threshold, mc.TopK, mc.TipsIn = tc.key, tc.thr, 3, tc.tipsIn
		r := testutil.Roller(t, m, 1, mem, func(c *rollout.Config, o *rollout.Options) {
			c.StepLimit = 4
			o.MemoryConfig = mc
			o.ReadOnlyMemory = true
		})
		job := testutil.Jobs(1, true)[0] // a job with memory
		job.Task, job.Variation, job.Seed = d.Task, d.Variation, 5
		eps, _, err := r.Run(ctx, []rollout.Job{job})
		require.NoError(t, err)
		ep := eps[0]
		require.NotEmpty(t, ep.Steps)
		// the episode as a Demo: its responses as the prompts show them
		played := Demo{Env: "textlab", Task: d.Task, Variation: d.Variation, Desc: ep.TaskDesc, FirstObs: ep.FirstObs}
		for _, s := range ep.Steps {
			played.Steps = append(played.Steps, Step{Action: s.Text, Observation: s.Observation})
		}
		keys := stepKeys(pc, tc.key, played)
		turns := actionTurns(pc, played)
		var shown int
		for i, s := range ep.Steps {
			msgs, n, err := memoryPrompt(ctx, mem, ns, mc.Query(), pc, tc.tipsIn, played, keys, turns, i)
			require.NoError(t, err)
			assert.Equal(t, keys[i], s.Key, "%s step %d: the retrieval key", tc.key, i)
			require.Equal(t, s.Retrieved, n, "%s step %d: tips retrieved", tc.key, i)
			if n == 0 {
				continue
			}
			shown++
			// the chat rendered with the episode's sampled responses as tokens
			// (as the rollout's prompts hold them)
			resps := make([][]int32, i)
			for j := range resps {
				resps[j] = ep.Steps[j].Response
				if n := len(resps[j]); n > 0 && m.IsEOG(resps[j][n-1]) {
					resps[j] = resps[j][:n-1]
				}
			}
			want, err := r.Renderer().TokensWithResponses(msgs, resps, true)
			require.NoError(t, err)
			require.Equal(t, want.Tokens, s.Prompt, "%s %s step %d: the record's prompt is the rollout's", tc.key, tc.tipsIn, i)
			assert.Equal(t, s.Tips, rollout.FormatTips(mustRetrieve(t, mem, ns, keys[i], mc.Query())))
		}
		assert.Positive(t, shown, "%s: no step retrieved a tip", tc.key)
	}
}

func mustRetrieve(t *testing.T, mem *memstore.Store, ns, key string, q memstore.Query) []memstore.Match {
	t.Helper()
	res, err := mem.RetrieveText(context.Background(), ns, key, q)
	require.NoError(t, err)
	return res.Entries
}

// TestReadRecords: every record is the demo's prompt at its step with the
// block of its memory (memoryPrompt over the namespace it names) and the
// demo's action as the one trained answer; "read-all" blocks mix the
// demo's score-100 entries (first: the best score) with low-score ones,
// "read-fail" blocks show only the attempts; at least one record shows a
// low-score entry whose action is not the answer (what to avoid); the
// same inputs give the same records.
func TestReadRecords(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc, cfg := study3ReadConfig()
	cfg.FailureSteps = 6
	var seen = map[string]int{}
	var avoid, mixed int
	for v := range 3 {
		c := readCaseOf(t, env, v, pc, cfg)
		d, mem, ns, keys, turns, q := c.d, c.mem, c.ns, c.keys, c.turns, c.q
		for _, r := range c.recs {
			require.NoError(t, r.Check())
			i := r.Meta["step"].(int) - 1
			space := r.Meta["memory"].(string)
			seen[space]++
			want, n, err := memoryPrompt(ctx, mem, space+"|"+ns, q, pc, cfg.TipsIn, d, keys, turns, i)
			require.NoError(t, err)
			require.Equal(t, want, r.Messages[:len(r.Messages)-1], "step %d (%s)", i, space)
			require.Equal(t, n, r.Meta["tips"])
			last := r.Messages[len(r.Messages)-1]
			require.Equal(t, sft.RoleAssistant, last.Role)
			require.Equal(t, d.Steps[i].Action, last.Content)
			for k := range r.Messages[:len(r.Messages)-1] {
				require.Equal(t, r.Messages[k].Role == sft.RoleAssistant, r.IsContext(k), "only the answer is trained")
			}
			lines := tipLines(t, r.Messages[len(r.Messages)-2].Content)
			high := 0
			for k, l := range lines {
				if strings.Contains(l, "score 100/100") {
					require.Equal(t, k, high, "the best score first")
					high++
				} else if !strings.Contains(l, "was "+quoteAction(d.Steps[i].Action)) {
					avoid++
				}
			}
			switch space {
			case "read-all":
				if high > 0 && high < len(lines) {
					mixed++
				}
			case "read-fail":
				assert.Zero(t, high, "a fail block shows the demo")
			default:
				t.Fatalf("memory %q", space)
			}
		}
	}
	assert.Positive(t, seen["read-all"])
	assert.Positive(t, seen["read-fail"])
	assert.Positive(t, avoid, "no block shows a low-score action other than the answer")
	assert.Positive(t, mixed, "no read-all block mixes high and low scores")

	// refusals: as TipRecords'
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 0, 0)
	require.NoError(t, err)
	bad := cfg
	bad.TopK = 0
	_, err = ReadRecords(ctx, env, d, openTipMem(t), bad)
	require.ErrorIs(t, err, ErrDemo)
}

// readCase is ReadRecords' records of find-living-thing variation v's
// explore demo (not empty, and the same when built again in a fresh memory),
// the memory they were built in, and what a test needs to render a record's
// prompt from a namespace of it (memoryPrompt).
type readCase struct {
	d     Demo
	mem   *memstore.Store
	recs  []sft.ChatRecord
	ns    string
	keys  []string
	turns []rollout.Turn
	q     memstore.Query
}

func readCaseOf(t *testing.T, env environments.Env, v int, pc rollout.PromptConfig, cfg TipRecordConfig) readCase {
	t.Helper()
	ctx := context.Background()
	d, err := Explore(ctx, env, "textlab", "find-living-thing", v, 0)
	require.NoError(t, err)
	mem := openTipMem(t)
	recs, err := ReadRecords(ctx, env, d, mem, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	again, err := ReadRecords(ctx, env, d, openTipMem(t), cfg)
	require.NoError(t, err)
	require.Equal(t, recs, again, "same inputs, other records")
	return readCase{d: d, mem: mem, recs: recs, ns: rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace(),
		keys: stepKeys(pc, cfg.Key, d), turns: actionTurns(pc, d),
		q: memstore.Query{K: cfg.TopK, Threshold: float32(cfg.Threshold), Order: memstore.OrderByScoreStable}}
}

// quoteAction is an action as TipContent quotes it.
func quoteAction(a string) string {
	c := rollout.TipContent("", a, 0)
	c = c[strings.Index(c, "was ")+len("was "):]
	return c[:strings.Index(c, "; the episode")]
}

// OwnReadRecords (gate run 4): blocks retrieved from an existing memory of
// the policy's own attempts at the demo's variation — the records' prompts
// are memoryPrompt's on that namespace, the answer the demo's action, a
// namespace with nothing gives no record — and demos.Run reads such a
// memory with read_memory (read-only: the file is unchanged), refusing it
// without read_records.
func TestOwnReadRecords(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc, cfg := study3ReadConfig()
	d, err := Explore(ctx, env, "textlab", "find-living-thing", 2, 0)
	require.NoError(t, err)
	ns := rollout.Job{Task: d.Task, Variation: d.Variation}.Namespace()
	path := filepath.Join(t.TempDir(), "own.db")
	own, err := memstore.Open(path, tipEmbedder())
	require.NoError(t, err)
	// "the policy's own attempts": two attempts that leave the demo's path
	// at steps 1 and 3, stored as a rollout stores its episodes
	rng := rand.New(rand.NewPCG(3, 4))
	for k, p := range []int{1, 3} {
		f, err := DeviatingAttempt(ctx, env, d, p, 6, 0, rng)
		require.NoError(t, err)
		_, err = own.Add(ctx, ns, demoEntries(pc, cfg.Key, f, "own"+strconv.Itoa(k)))
		require.NoError(t, err)
	}
	recs, err := OwnReadRecords(ctx, d, own, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	keys, turns := stepKeys(pc, cfg.Key, d), actionTurns(pc, d)
	q := memstore.Query{K: cfg.TopK, Threshold: float32(cfg.Threshold), Order: memstore.OrderByScoreStable}
	steps := map[int]bool{}
	for _, r := range recs {
		require.NoError(t, r.Check())
		i := r.Meta["step"].(int) - 1
		steps[i] = true
		assert.Equal(t, "own", r.Meta["memory"])
		want, n, err := memoryPrompt(ctx, own, ns, q, pc, cfg.TipsIn, d, keys, turns, i)
		require.NoError(t, err)
		require.Positive(t, n)
		require.Equal(t, want, r.Messages[:len(r.Messages)-1], "step %d", i)
		last := r.Messages[len(r.Messages)-1]
		require.Equal(t, sft.RoleAssistant, last.Role)
		require.Equal(t, d.Steps[i].Action, last.Content)
		assert.Contains(t, r.Messages[len(r.Messages)-2].Content, rollout.TipsHeader)
	}
	assert.LessOrEqual(t, len(steps), cfg.Records)
	// an empty namespace: nothing
	other := d
	other.Variation = 99
	none, err := OwnReadRecords(ctx, other, own, cfg)
	require.NoError(t, err)
	assert.Empty(t, none)
	require.NoError(t, own.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	// through demos.Run
	dir := t.TempDir()
	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.SkipVariations, c.Kind = "textlab", []string{"find-living-thing"}, 1, 2, KindExplore
	c.EnvOptions.Simplifications = "easy"
	c.Key, c.Threshold, c.TopK, c.TipsIn = rollout.KeyObservation, 0.95, 3, rollout.TipsLastTurn
	c.ReadRecords, c.ReadMemory, c.Out = 8, path, filepath.Join(dir, "d.jsonl")
	res, err := Run(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.ReadRecords)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "read_memory was written")
	c.ReadRecords, c.Out = 0, filepath.Join(dir, "e.jsonl")
	_, err = Run(ctx, c)
	require.ErrorContains(t, err, "read_memory "+path+" is used only by read_records")
}

// study3ReadConfig: 8 read records per demo with Study 3's memory settings
// (observation key, threshold 0.95, top-k 3, last-turn blocks) in the
// default prompt format.
// trialReadSetup is the textlab environment (easy) and Study 3's read
// config with one- or two-episode memories (ReadTrials 2), 12 records
// and 6-step deviations per demo: the setting the short and wrong-tip
// records are compared in.
func trialReadSetup(t *testing.T) (environments.Env, rollout.PromptConfig, TipRecordConfig) {
	t.Helper()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc, cfg := study3ReadConfig()
	cfg.FailureSteps, cfg.Records, cfg.ReadTrials = 6, 12, 2
	return env, pc, cfg
}

func study3ReadConfig() (rollout.PromptConfig, TipRecordConfig) {
	pc := rollout.DefaultPromptConfig()
	cfg := DefaultTipRecordConfig()
	cfg.Prompt, cfg.Records, cfg.TopK, cfg.Threshold, cfg.Key, cfg.TipsIn = pc, 8, 3, 0.95, rollout.KeyObservation, rollout.TipsLastTurn
	return pc, cfg
}

// ReadTrials (issue 36, gate-sized blocks): every record's block comes from
// a memory of its own with at most n episodes — read-all: the demo (score
// 100), with n = 2 sometimes after one attempt; read-fail: no demo, the
// attempt that took another action than the demo's at the record's step
// among its episodes — and the record's prompt is memoryPrompt's on that
// memory, answered with the demo's action.
func TestReadRecordsTrials(t *testing.T) {
	ctx := context.Background()
	env, err := textlab.New(environments.Options{Simplifications: "easy"})
	require.NoError(t, err)
	pc, cfg := study3ReadConfig()
	cfg.FailureSteps, cfg.Records = 6, 12
	for _, n := range []int{1, 2} {
		cfg.ReadTrials = n
		seen := map[string]int{}
		sizes := map[int]int{} // episodes in a record's memory → records
		for v := range 3 {
			c := readCaseOf(t, env, v, pc, cfg)
			d, mem, ns, keys, turns, q := c.d, c.mem, c.ns, c.keys, c.turns, c.q
			for _, r := range c.recs {
				i := r.Meta["step"].(int) - 1
				kind := r.Meta["memory"].(string)
				seen[kind]++
				require.Equal(t, d.Steps[i].Action, r.Messages[len(r.Messages)-1].Content)
				// the record's own memory: a namespace of this kind whose
				// retrieval renders exactly the record's prompt (several may:
				// equal entries in two memories) and that holds what it should
				var found bool
				var why []string
				for _, space := range mem.Namespaces() {
					if !strings.HasPrefix(space, kind+"|"+ns+"|") {
						continue
					}
					want, _, err := memoryPrompt(ctx, mem, space, q, pc, cfg.TipsIn, d, keys, turns, i)
					require.NoError(t, err)
					if !assert.ObjectsAreEqual(want, r.Messages[:len(r.Messages)-1]) {
						continue
					}
					es, err := mem.List(ctx, space, 0)
					require.NoError(t, err)
					// each episode's actions in step order (List: newest first)
					acts := map[string][]string{}
					for k := len(es) - 1; k >= 0; k-- {
						_, a, _, ok := rollout.ParseTipContent(es[k].Content)
						require.True(t, ok, es[k].Content)
						acts[es[k].Episode] = append(acts[es[k].Episode], a)
					}
					// an attempt that replays the demo to step i, then does another
					// thing: the store keeps an episode's first entry of each
					// action (equal contents are duplicates), so its actions start
					// with the demo's first i, deduplicated, and the next one
					// stored, if any, is not the demo's step i
					var prefix []string
					for _, a := range d.Actions()[:i] {
						if !slices.Contains(prefix, a) {
							prefix = append(prefix, a)
						}
					}
					deviated := false
					for ep, as := range acts {
						if ep != ns+"/demo" && len(as) >= len(prefix) && slices.Equal(as[:len(prefix)], prefix) &&
							(len(as) == len(prefix) || as[len(prefix)] != d.Steps[i].Action) {
							deviated = true
						}
					}
					_, demo := acts[ns+"/demo"]
					switch {
					case len(acts) > n:
						why = append(why, fmt.Sprintf("%s: a memory of %d episodes", space, len(acts)))
					case kind == "read-all" && !demo:
						why = append(why, space+": a read-all memory without the demo")
					case kind == "read-fail" && demo:
						why = append(why, space+": a read-fail memory with the demo")
					case kind == "read-fail" && !deviated:
						why = append(why, fmt.Sprintf("%s: no attempt took another action than the demo's at step %d: %q", space, i, acts))
					case kind != "read-all" && kind != "read-fail":
						t.Fatalf("memory %q", kind)
					default:
						sizes[len(acts)]++
						found = true
					}
					if found {
						break
					}
				}
				require.True(t, found, "step %d (%s): no memory of its own renders the record's prompt and holds what it should: %q", i, kind, why)
			}
		}
		assert.Positive(t, seen["read-all"], "n %d", n)
		assert.Positive(t, seen["read-fail"], "n %d", n)
		assert.Positive(t, sizes[1], "n %d: no memory of one episode", n)
		if n == 2 {
			assert.Positive(t, sizes[2], "no memory of two episodes")
		}
	}
	// refusals
	bad := cfg
	bad.ReadTrials = -1
	require.ErrorIs(t, bad.Check(), ErrDemo)

	// through demos.Run: the records of ReadRecords under read_trials, and
	// read_trials refused without read_records or with read_memory
	dir := t.TempDir()
	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.Kind = "textlab", []string{"find-living-thing"}, 2, KindExplore
	c.EnvOptions.Simplifications = "easy"
	c.Key, c.Threshold, c.TopK, c.TipsIn = rollout.KeyObservation, 0.95, 3, rollout.TipsLastTurn
	c.ReadRecords, c.ReadTrials, c.TipFailures, c.Out = 6, 2, 3, filepath.Join(dir, "d.jsonl")
	res, err := Run(ctx, c)
	require.NoError(t, err)
	want := 0
	for v := range 2 {
		d, err := Explore(ctx, env, "textlab", "find-living-thing", v, 0)
		require.NoError(t, err)
		rc := c.tipRecordConfig(pc)
		rc.Records, rc.FailureTips = c.ReadRecords, false
		recs, err := ReadRecords(ctx, env, d, openTipMem(t), rc)
		require.NoError(t, err)
		want += len(recs)
	}
	assert.Equal(t, want, res.ReadRecords)
	for _, c2 := range []func(*RunConfig){
		func(c *RunConfig) { c.ReadRecords = 0 },
		func(c *RunConfig) { c.ReadMemory = filepath.Join(dir, "m.db") },
		func(c *RunConfig) { c.ReadTrials = -1 },
	} {
		b := c
		c2(&b)
		require.ErrorContains(t, b.Validate(), "read_trials")
	}
}

// ReadShort: every short record is the full-history record of the same
// step and memory with the turns between the task's first answer and the
// record's own turn dropped — the system message, the first user turn and
// its answer (context, not trained), the record's user turn with its block
// unchanged, the demo's action the one trained answer — and a record at the
// first step (nothing to drop) is left out; demos.Run refuses read_short
// without read_records.
func TestReadRecordsShort(t *testing.T) {
	env, pc, cfg := trialReadSetup(t)
	shortCfg := cfg
	shortCfg.ReadShort = true
	var compared, dropped int
	for v := range 3 {
		full := readCaseOf(t, env, v, pc, cfg).recs
		short := readCaseOf(t, env, v, pc, shortCfg).recs
		byStep := map[int]sft.ChatRecord{}
		first := 0 // full records at the first step
		for _, r := range full {
			byStep[r.Meta["step"].(int)] = r
			if r.Meta["step"].(int) == 1 {
				first++
			}
		}
		dropped += first
		for _, s := range short {
			step := s.Meta["step"].(int)
			require.Greater(t, step, 1, "a short record at the first step")
			require.Equal(t, true, s.Meta["short"])
			f, ok := byStep[step]
			require.True(t, ok, "step %d: no full record", step)
			require.Equal(t, f.Meta["memory"], s.Meta["memory"])
			fm, sm := f.Messages, s.Messages
			require.Equal(t, sft.RoleSystem, sm[0].Role)
			require.Len(t, sm, 5)
			assert.Equal(t, fm[:3], sm[:3], "system, first turn and its answer")
			assert.Equal(t, fm[len(fm)-2:], sm[3:], "the record's turn with its block, and the answer")
			assert.Contains(t, sm[3].Content, "<memory>")
			assert.True(t, s.IsContext(2) && !s.IsContext(4), "the first answer is context, the last trained")
			require.NoError(t, s.Check())
			compared++
		}
		assert.Equal(t, len(full), len(short)+first, "variation %d: a short record per full one past the first step", v)
	}
	assert.Positive(t, compared)
	t.Logf("%d short records compared, %d first-step records left out", compared, dropped)

	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.Kind, c.Out = "textlab", []string{"find-living-thing"}, 1, KindExplore, filepath.Join(t.TempDir(), "d.jsonl")
	c.EnvOptions.Simplifications = "easy"
	c.ReadShort = true
	require.ErrorContains(t, c.Validate(), "read_short")
}

// blockLines are the entries (tip, action, score) of the memory block that
// ends a record's last user turn, parsed from its text.
func blockLines(t *testing.T, r sft.ChatRecord) (tips, rest []string) {
	t.Helper()
	u := r.Messages[len(r.Messages)-2].Content
	b := u[strings.Index(u, rollout.TipsBegin):]
	for _, line := range strings.Split(b, "\n") {
		if !strings.HasPrefix(line, "- ") {
			continue
		}
		tip, a, s, ok := rollout.ParseTipContent(line)
		require.True(t, ok, "block line %q", line)
		tips, rest = append(tips, tip), append(rest, fmt.Sprintf("%s %g", a, s))
	}
	return tips, rest
}

// WrongTips (the fifth round of probes, issue 36): with a probability, a
// stored episode shows another episode's tip. The records are the same
// records (steps, memories, answers; the blocks the same entries in the
// same order, code-written action and score) as without, only the tips of
// some entries differ; an entry marked wrong shows a tip that is not its
// episode's, the others their own; the records' meta count the wrong
// entries of their block; among them score-100 entries with a failed
// attempt's tip; about the given share of episodes is rewritten. Out of
// range and without read records it is refused.
func TestReadRecordsWrongTips(t *testing.T) {
	env, pc, cfg := trialReadSetup(t)
	wrongCfg := cfg
	wrongCfg.WrongTips = 0.5
	var recs, withWrong, hundredWrong, entries, wrongEntries int
	for v := range 6 {
		bc := readCaseOf(t, env, v, pc, cfg)
		base := bc.recs
		wc := readCaseOf(t, env, v, pc, wrongCfg)
		require.Len(t, wc.recs, len(base), "variation %d", v)
		for i, w := range wc.recs {
			b := base[i]
			_, hasMeta := b.Meta["wrong_tips"]
			require.False(t, hasMeta, "wrong_tips meta without WrongTips")
			require.Equal(t, b.Meta["step"], w.Meta["step"])
			require.Equal(t, b.Meta["memory"], w.Meta["memory"])
			require.Equal(t, b.Messages[len(b.Messages)-1], w.Messages[len(w.Messages)-1], "the answer")
			bt, brest := blockLines(t, b)
			wt, wrest := blockLines(t, w)
			require.Equal(t, brest, wrest, "variation %d step %v: the block's actions and scores", v, w.Meta["step"])
			changed := 0
			for k := range bt {
				if bt[k] != wt[k] {
					changed++
					if strings.HasSuffix(wrest[k], " 100") {
						hundredWrong++
					}
				}
			}
			n := w.Meta["wrong_tips"].(int)
			assert.Equal(t, changed, n, "variation %d step %v: the entries with a foreign tip", v, w.Meta["step"])
			recs++
			if n > 0 {
				withWrong++
			}
		}
		// every stored episode: a wrong one shows another episode's tip, the
		// others their own (the base memory's), one tip per episode
		baseTips, _ := storedTips(t, bc)
		tips, n := storedTips(t, wc)
		for ep, tip := range tips {
			own, ok := baseTips[strings.TrimSuffix(ep, WrongTipSuffix)]
			require.True(t, ok, "episode %s not in the memory without wrong tips", ep)
			if strings.HasSuffix(ep, WrongTipSuffix) {
				assert.NotEqual(t, own, tip, "episode %s: marked wrong, its own tip", ep)
				wrongEntries += n[ep]
			} else {
				assert.Equal(t, own, tip, "episode %s", ep)
			}
			entries += n[ep]
		}
	}
	t.Logf("%d records, %d with a foreign tip in their block, %d score-100 entries shown with another episode's tip; %d of %d stored entries wrong",
		recs, withWrong, hundredWrong, wrongEntries, entries)
	assert.Positive(t, hundredWrong, "a successful entry with a failed attempt's tip")
	assert.Less(t, withWrong, recs, "some blocks keep their own tips")
	assert.InDelta(t, 0.5, float64(wrongEntries)/float64(entries), 0.2, "about half the entries rewritten")

	c := DefaultRunConfig()
	c.Env, c.Tasks, c.Variations, c.Kind, c.Out = "textlab", []string{"find-living-thing"}, 1, KindExplore, filepath.Join(t.TempDir(), "d.jsonl")
	c.EnvOptions.Simplifications = "easy"
	c.ReadWrongTips = 0.5
	require.ErrorContains(t, c.Validate(), "read_wrong_tips")
	c.ReadRecords, c.ReadWrongTips = 2, 1.5
	require.ErrorContains(t, c.Validate(), "wrong tips 1.5")
}

// storedTips is the tip every stored episode of a read case's memories
// shows (one per episode: the test fails otherwise) and its entries.
func storedTips(t *testing.T, c readCase) (tips map[string]string, entries map[string]int) {
	t.Helper()
	ctx := context.Background()
	tips, entries = map[string]string{}, map[string]int{}
	seen := map[int64]bool{}
	for r := range 64 { // every record's own memory (ReadTrials: trialSpace r, r < Records)
		for _, name := range []string{"read-all", "read-fail"} {
			for _, k := range c.keys {
				res, err := c.mem.RetrieveText(ctx, trialSpace(name, c.ns, r), k, memstore.Query{K: 1000, Threshold: -1})
				require.NoError(t, err)
				for _, m := range res.Entries {
					if seen[m.ID] {
						continue
					}
					seen[m.ID] = true
					tip, _, _, ok := rollout.ParseTipContent(m.Content)
					require.True(t, ok)
					if prev, ok := tips[m.Episode]; ok {
						require.Equal(t, prev, tip, "one tip per stored episode %s", m.Episode)
					}
					tips[m.Episode] = tip
					entries[m.Episode]++
				}
			}
		}
	}
	require.NotEmpty(t, tips)
	return tips, entries
}
