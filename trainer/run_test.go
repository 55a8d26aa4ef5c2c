package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/environments"
	_ "github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/optim"
)

// noisyEnv is textlab whose score also rewards the actions' lengths
// (10 × (total length mod 5)): an untrained tiny model never scores in
// textlab, so its GRPO groups would all have zero variance and no update
// would ever run. Everything else is textlab's.
type noisyEnv struct {
	environments.Env
	n int
}

func (e *noisyEnv) Reset(ctx context.Context, task string, v int, seed int64) (environments.ResetResult, error) {
	e.n = 0
	return e.Env.Reset(ctx, task, v, seed)
}

func (e *noisyEnv) Step(ctx context.Context, a string) (environments.StepResult, error) {
	e.n += len(a)
	return e.Env.Step(ctx, a)
}

func (e *noisyEnv) Score() float64 { return e.Env.Score() + float64(10*(e.n%5)) }

func init() {
	tl, err := environments.Lookup("textlab")
	if err != nil {
		panic(err)
	}
	environments.Register(environments.Spec{Name: "textlab-noisy", Description: "textlab with a length bonus (tests)",
		New: func(o environments.Options) (environments.Env, error) {
			e, err := tl.New(o)
			if err != nil {
				return nil, err
			}
			return &noisyEnv{Env: e}, nil
		},
		Tasks: tl.Tasks})
}

// tinyRunConfig is a fast run on the generated tiny model over textlab:
// 2 task variations × 2 rollouts, 3 env steps per episode, short actions.
func tinyRunConfig(t testing.TB, model, preset string, steps int, sets ...string) Config {
	t.Helper()
	base := []string{"batch.tasks=2", "batch.rollouts=2", "rollout.step_limit=3", "rollout.max_action_tokens=6",
		"rollout.tip_max_tokens=8", "memory.top_k=2", "context=2048", "threads=1", "lora.rank=2", "lora.alpha=4", "update.micro_batch=4",
		"update.lr=0.01", "seed=3", "env=textlab-noisy", "tasks=[melt/0, light-bulb/1]"}
	c, err := LoadConfig("", preset, append(base, sets...))
	if err != nil {
		t.Fatal(err)
	}
	c.Model, c.Steps = model, steps
	return c
}

func readMetrics(t testing.TB, dir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

var metricFields = []string{"step", "mode", "time", "seed", "score_mean", "success_rate", "reward_mean", "tips_retrieved_mean",
	"tips_written", "loss", "clip_frac", "approx_kl", "grad_norm", "masked_seqs", "sample_steps", "trained_tokens", "rollout_tokens_per_s",
	"env_steps_per_s", "t_rollout", "t_embed_retrieve", "t_tips", "t_update", "update_compute_bytes", "max_rss_bytes"}

// TestTrainPresets: each preset runs end to end and writes the run
// directory; grpo never retrieves or writes tips, memory-only never
// changes the adapter, empo2 with p = 1 (forced memory) writes tips that
// later steps retrieve and trains off-policy.
func TestTrainPresets(t *testing.T) {
	model := testutil.ModelFile(t)
	for _, tc := range []struct {
		preset string
		sets   []string
	}{
		{"grpo", nil},
		{"memory-only", []string{"eval.every=2", "eval.memory=both", "eval.max_variations=1"}},
		// off-policy every step; δ = −20 because the untrained tiny model's
		// tokens have log-probs near log(1/512) ≈ −6.2, so δ = −5 masks all
		{"empo2", []string{"mode.memory_prob=1", "mode.offpolicy_prob=1", "memory.threshold=0.01", "update.low_prob_threshold=-20"}},
		{"empo2", []string{"mode.memory_prob=1", "mode.offpolicy_prob=0", "mode.per=rollout"}}, // on-policy with tips
	} {
		t.Run(tc.preset+strings.Join(tc.sets, ","), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			cfg := tinyRunConfig(t, model, tc.preset, 2, tc.sets...)
			res, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			if res.LastStep != 2 || res.Interrupted {
				t.Fatalf("result %+v", res)
			}
			for _, f := range []string{ConfigFile, MemoryFile, MetricsFile, "checkpoints/latest", "checkpoints/step-000002/adapter.gguf", "checkpoints/step-000002/state.gguf"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			ms := readMetrics(t, dir)
			if len(ms) != 2 {
				t.Fatalf("%d metrics lines", len(ms))
			}
			var rss float64
			for _, m := range ms {
				for _, f := range metricFields {
					if _, ok := m[f]; !ok {
						t.Fatalf("metrics lack %q: %v", f, m)
					}
				}
				// the update's compute peak is there when an update ran (π_old
				// recompute or PPO graphs), absent otherwise; the peak RSS only grows
				if upd, cb := m["updates"].(float64), m["update_compute_bytes"].(float64); (upd > 0) != (cb > 0) {
					t.Fatalf("step %v: %v updates, update_compute_bytes %v", m["step"], upd, cb)
				}
				if r := m["max_rss_bytes"].(float64); r < 1<<20 || r < rss {
					t.Fatalf("step %v: max_rss_bytes %v (before %v)", m["step"], r, rss)
				} else {
					rss = r
				}
			}
			back, err := LoadRunConfig(dir, nil)
			if err != nil || back.Preset != tc.preset || back.Batch != cfg.Batch {
				t.Fatalf("config.yaml: %+v %v", back.Batch, err)
			}
			store, err := memstore.Open(filepath.Join(dir, MemoryFile), nil)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := store.Stats(context.Background())
			store.Close()
			tipsWritten := ms[0]["tips_written"].(float64) + ms[1]["tips_written"].(float64)
			switch tc.preset {
			case "grpo":
				if st.Entries != 0 || tipsWritten != 0 || ms[0]["mode"] != string(ModeOnPolicy) || ms[1]["tips_retrieved_mean"].(float64) != 0 {
					t.Fatalf("grpo: %d entries, metrics %v", st.Entries, ms)
				}
			case "memory-only":
				if st.Entries == 0 || ms[0]["updates"].(float64) != 0 || ms[1]["trained_tokens"].(float64) != 0 {
					t.Fatalf("memory-only: %d entries, metrics %v", st.Entries, ms)
				}
				s, err := optim.Load(filepath.Join(dir, "checkpoints/step-000002", optim.StateFile))
				if err != nil || s.Step != 0 {
					t.Fatalf("memory-only made updates: %v %v", s, err)
				}
				// periodic eval (eval.every 2): one line after step 2, memory off and on
				b, err := os.ReadFile(filepath.Join(dir, EvalFile))
				if err != nil {
					t.Fatal(err)
				}
				var line struct {
					Step      int `json:"step"`
					MemoryOff *struct {
						ScoreMean *float64 `json:"score_mean"`
					} `json:"memory_off"`
					MemoryOn *struct {
						Episodes int `json:"episodes"`
					} `json:"memory_on"`
				}
				if err := json.Unmarshal(b, &line); err != nil || line.Step != 2 || line.MemoryOff == nil || line.MemoryOn == nil ||
					line.MemoryOff.ScoreMean == nil || line.MemoryOn.Episodes == 0 {
					t.Fatalf("eval.jsonl = %s (%v)", b, err)
				}
			case "empo2":
				if st.Entries == 0 || int(tipsWritten) > st.Entries {
					t.Fatalf("empo2: %d entries, %v written", st.Entries, tipsWritten)
				}
				if cfg.Mode.Per == "step" && (ms[0]["mode"] != string(ModeOffPolicy) || ms[1]["tips_retrieved_mean"].(float64) == 0 ||
					ms[0]["trained_tokens"].(float64) == 0 || ms[1]["updates"].(float64) == 0) {
					t.Fatalf("forced off-policy: no retrieval or no training: %v", ms)
				}
				// the masking rate's denominator: responses before masking
				for _, m := range ms {
					if m["sample_steps"].(float64) < m["masked_seqs"].(float64) || (m["trained_tokens"].(float64) > 0 && m["sample_steps"].(float64) == 0) {
						t.Fatalf("sample_steps %v vs masked %v", m["sample_steps"], m["masked_seqs"])
					}
				}
			}
		})
	}
}
