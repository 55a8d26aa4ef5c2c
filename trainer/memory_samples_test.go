package trainer

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/internal/testutil"
	"github.com/empo2/empo2/trainer/rollout"
)

// TestOffPolicyInputsFromRollouts: real memory rollouts with the default
// memory (tips in every turn). Their off-policy training inputs hold no tip
// text, each is the chat without tips rendered on its own (recomputed here
// from the episode's turns and responses), the behaviour sequences keep the
// tips, and with packing an episode's tip-free prompts extend each other.
func TestOffPolicyInputsFromRollouts(t *testing.T) {
	m, r, eps := offPolicyTipRollouts(t)
	for i := range eps {
		eps[i].Score = float64(10 * i) // a signal in the group
	}
	multi := 0
	pc := r.Config().Prompt
	for _, ep := range eps {
		var bare []rollout.Turn
		var resps [][]int32
		for k, s := range ep.Steps {
			if len(s.TipSpans) > 1 {
				multi++
			}
			// the chat without tips, rendered on its own
			want, err := r.Renderer().TokensWithResponses(rollout.Messages(pc, ep.TaskDesc, ep.FirstObs, bare, ""), resps, true)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(want.Tokens, s.PromptWithoutTips()) {
				t.Fatalf("episode %s step %d: the prompt without tips is not the chat rendered without tips", ep.Namespace(), k)
			}
			bare = append(bare, rollout.Turn{Action: s.Text, Observation: s.Observation})
			resp := s.Response
			if m.IsEOG(resp[len(resp)-1]) {
				resp = resp[:len(resp)-1]
			}
			resps = append(resps, resp)
		}
	}
	if multi == 0 {
		t.Fatal("no prompt with tips in several turns")
	}
	dc := DefaultConfig()
	cfg := dc.SampleConfig()
	cfg.RecomputeOldLogp = false
	cfg.LowProbMask = MaskNever // the untrained tiny model's tokens are all below δ = −5
	for _, pack := range []bool{false, true} {
		cfg.Pack = pack
		ss, st, err := BuildSamples(eps, cfg, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) == 0 {
			t.Fatal("no samples")
		}
		for _, s := range ss {
			text, err := m.Detokenize(s.Seq.Tokens)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(text, rollout.TipsBegin) || strings.Contains(text, rollout.TipsHeader) || strings.Contains(text, "the episode ended with score") {
				t.Fatalf("pack=%v: tip text in an off-policy training input", pack)
			}
			for j, b := range s.behaviour {
				if b == nil {
					continue
				}
				bt, _ := m.Detokenize(b)
				if !strings.Contains(bt, rollout.TipsBegin) {
					t.Fatalf("pack=%v: the behaviour sequence of span %d lost its tips", pack, j)
				}
			}
		}
		if pack && st.PackedEpisodes == 0 {
			t.Fatal("the tip-free prompts extend each other, but nothing was packed")
		}
	}
}

// offPolicyTipRollouts: the default memory's real rollouts on testutil's
// model — 4 jobs played once, their tips written, then played again
// off-policy (one group, other seeds) with those tips retrieved every turn.
func offPolicyTipRollouts(t *testing.T) (*llama.Model, *rollout.Roller, []rollout.Episode) {
	t.Helper()
	ctx := context.Background()
	m := testutil.Model(t)
	mem := testutil.Store(t)
	r := testutil.Roller(t, m, 4, mem)
	jobs := testutil.Jobs(4, false)
	first, _, err := r.Run(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteTips(ctx, first, 1); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		jobs[i].Mode, jobs[i].Group = ModeOffPolicy, 0
		jobs[i].Seed += 50
	}
	eps, _, err := r.Run(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	return m, r, eps
}
