package rollout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/empo2/empo2/environments"
	_ "github.com/empo2/empo2/environments/textlab"
	_ "github.com/empo2/empo2/environments/webshop"
	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// keyEpisode is a played episode's retrieval keys: the conversation before
// every action, and the final one its entries are stored under.
type keyEpisode struct {
	task      string
	variation int
	steps     []string
	final     string
}

// episodeText is an episode's text as prompts show it.
type episodeText struct {
	task      string
	variation int
	desc      string
	first     string
	turns     []rollout.Turn
	name      string
}

// playRandom plays n episodes of each (task, variation) with random valid
// actions (seeded by the task, the variation and the episode) for at most
// maxSteps steps.
func playRandom(t *testing.T, env string, pairs [][2]any, n, maxSteps int) []episodeText {
	t.Helper()
	ctx := context.Background()
	spec, err := environments.Lookup(env)
	require.NoError(t, err)
	e, err := spec.New(environments.Options{})
	require.NoError(t, err)
	defer e.Close()
	var out []episodeText
	for _, p := range pairs {
		task, v := p[0].(string), p[1].(int)
		for k := 0; k < n; k++ {
			rng := rand.New(rand.NewPCG(rollout.MixSeed(int64(len(task)), int64(v)), uint64(k)))
			res, err := e.Reset(ctx, task, v, int64(k))
			require.NoError(t, err)
			ep := episodeText{task: task, variation: v, desc: res.TaskDescription, first: res.Observation, name: fmt.Sprintf("%s/%d", task, v)}
			for s := 0; s < maxSteps; s++ {
				acts, err := e.ValidActions(ctx)
				require.NoError(t, err)
				if len(acts) == 0 {
					break
				}
				a := acts[rng.IntN(len(acts))]
				sr, err := e.Step(ctx, a)
				require.NoError(t, err)
				ep.turns = append(ep.turns, rollout.Turn{Action: a, Observation: sr.Observation})
				if sr.Done {
					break
				}
			}
			out = append(out, ep)
		}
	}
	return out
}

// playKeys plays n episodes of each (task, variation) with random valid
// actions and returns their conversation keys.
func playKeys(t *testing.T, env string, pairs [][2]any, n, maxSteps int) []keyEpisode {
	t.Helper()
	pc := rollout.DefaultPromptConfig()
	var out []keyEpisode
	for _, ep := range playRandom(t, env, pairs, n, maxSteps) {
		ke := keyEpisode{task: ep.task, variation: ep.variation}
		for s := range ep.turns {
			ke.steps = append(ke.steps, rollout.StepKey(rollout.KeyConversation, pc, ep.desc, ep.first, ep.turns[:s]))
		}
		ke.final = rollout.StepKey(rollout.KeyConversation, pc, ep.desc, ep.first, ep.turns)
		out = append(out, ke)
	}
	return out
}

// keyCosines embeds every key with emb and returns the cosines between
// every step key of an episode and the final key of every other episode:
// same variation, same task but another variation, another task.
func keyCosines(t *testing.T, emb memstore.Embedder, eps []keyEpisode) (same, task, other []float64) {
	t.Helper()
	ctx := context.Background()
	finals := make([]string, len(eps))
	for i, e := range eps {
		finals[i] = e.final
	}
	fv, err := emb.Embed(ctx, finals)
	require.NoError(t, err)
	for i, e := range eps {
		sv, err := emb.Embed(ctx, e.steps)
		require.NoError(t, err)
		for j := range eps {
			if j == i {
				continue
			}
			for _, q := range sv {
				var c float64
				for d := range q {
					c += float64(q[d]) * float64(fv[j][d])
				}
				switch {
				case eps[j].task == e.task && eps[j].variation == e.variation:
					same = append(same, c)
				case eps[j].task == e.task:
					task = append(task, c)
				default:
					other = append(other, c)
				}
			}
		}
	}
	return same, task, other
}

func quantiles(x []float64) string {
	sort.Float64s(x)
	q := func(p float64) float64 { return x[min(len(x)-1, int(p*float64(len(x))))] }
	return fmt.Sprintf("n %d min %.3f p1 %.3f p50 %.3f p99 %.3f max %.3f", len(x), x[0], q(0.01), q(0.5), q(0.99), x[len(x)-1])
}

// TestConversationKeyThreshold calibrates memory.threshold for the hash
// embedder with conversation keys cut at 256 pieces (docs/memory.md): over
// textlab episodes played with random valid actions and by the untrained
// tiny model (its own, mostly meaningless responses), and WebShop episodes
// with random valid actions, every step's key of an episode is compared
// with the final key (under which entries are stored) of every other
// episode. The default threshold passes every pair of the same variation,
// with a margin of at least 0.1, as MiniLM passes 0.5 in the reference
// runs. Pairs of different variations are logged: in textlab they are as
// similar as those of one variation (the variations of a task differ by a
// word or two of the task text, and all tasks start in the same hallway),
// so no threshold separates them; each variation's own namespace does.
func TestConversationKeyThreshold(t *testing.T) {
	emb := memstore.NewHashEmbedder(memstore.DefaultDim).WithMaxPieces(rollout.DefaultKeyPieces)
	thr := rollout.DefaultMemoryConfig().Threshold
	for _, c := range []struct {
		env   string
		pairs [][2]any
		steps int
	}{
		{"textlab", [][2]any{{"melt", 0}, {"melt", 1}, {"melt", 2}, {"boil", 0}, {"boil", 3}, {"find-living-thing", 0}, {"find-living-thing", 5},
			{"light-bulb", 1}, {"use-thermometer", 2}, {"use-thermometer", 4}}, 30},
		{"webshop", [][2]any{{"webshop", 600}, {"webshop", 601}, {"webshop", 602}, {"webshop", 603}, {"webshop", 604}}, 15},
	} {
		eps := playKeys(t, c.env, c.pairs, 4, c.steps)
		if c.env == "textlab" { // and the tiny model's own (random) responses
			m := testutil.Model(t)
			r := testutil.Roller(t, m, 4, nil, func(c *rollout.Config, _ *rollout.Options) { c.StepLimit = 10 })
			var jobs []rollout.Job
			for _, p := range c.pairs[:4] {
				for k := 0; k < 3; k++ {
					jobs = append(jobs, rollout.Job{Task: p[0].(string), Variation: p[1].(int), Seed: int64(10 + k)})
				}
			}
			played, _, err := r.Run(context.Background(), jobs)
			require.NoError(t, err)
			for _, ep := range played {
				ke := keyEpisode{task: ep.Task, variation: ep.Variation}
				for _, s := range ep.Steps {
					ke.steps = append(ke.steps, s.Key)
				}
				// the final conversation: the last key, the last action and the final observation
				last := ep.Steps[len(ep.Steps)-1]
				ke.final = last.Key + " assistant: " + last.Text + " user: " + last.Observation
				eps = append(eps, ke)
			}
		}
		same, task, other := keyCosines(t, emb, eps)
		t.Logf("%s same variation:  %s", c.env, quantiles(same))
		require.Greater(t, same[0], thr+0.1, "%s: a pair of the same variation at or near the threshold", c.env)
		for _, x := range []struct {
			name string
			cos  []float64
		}{{"other variation", task}, {"other task", other}} {
			if len(x.cos) > 0 {
				above := 0
				for _, v := range x.cos {
					if v > thr {
						above++
					}
				}
				t.Logf("%s %s: %s; %.1f%% above %.2f", c.env, x.name, quantiles(x.cos), 100*float64(above)/float64(len(x.cos)), thr)
			}
		}
	}
}
