package trainer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/internal/sysmem"
	"github.com/empo2/empo2/trainer/internal/testutil"
)

// TestPlanEngine: the memory plan from the model's sizes and the memory
// available, recomputed here from its definition (docs/training.md).
func TestPlanEngine(t *testing.T) {
	lm := testutil.Model(t)
	stored, err := cgo.SharedTransposedBytes(lm)
	if err != nil || stored <= 0 {
		t.Fatalf("stored Wᵀ %d, %v", stored, err)
	}
	info := lm.Info()
	W := int64(info.SizeBytes)
	cfg, err := LoadConfig("", "empo2", []string{"context=1024", "batch.tasks=1", "batch.rollouts=2"})
	if err != nil {
		t.Fatal(err)
	}
	// F32 K and V of every layer, KV heads × head dim, per token of each sequence
	R := int64(2*4*info.NLayer*info.NHeadKV*(info.NEmbd/info.NHead))*1024*2 + 1<<30
	mem := func(b int64) sysmem.Memory { return sysmem.Memory{Bytes: b, Source: "test", Total: b} }
	set := func(tr Transpose, mib int64) Config {
		c := cfg
		c.Update.Transpose, c.Update.MaxComputeMiB = tr, mib
		return c
	}
	for _, c := range []struct {
		name    string
		cfg     Config
		mem     sysmem.Memory
		inGraph bool
		budget  int64
		max     int64
		reason  string
	}{
		{"unknown memory", set(TransposeAuto, 0), sysmem.Memory{}, false, 0, 0, "memory unknown"},
		{"plenty", set(TransposeAuto, 0), mem(W + R + 10*stored), false, max(9*stored, 256<<20), 0, "stored Wᵀ"},
		{"just fits", set(TransposeAuto, 0), mem(W + R + 2*stored), false, max(stored, 256<<20), 0, "stored Wᵀ"},
		{"too tight", set(TransposeAuto, 0), mem(W + R + 2*stored - 1), true, max(2*stored-1, 256<<20), 0, "made in each graph"},
		{"forced stored", set(TransposeStored, 0), mem(W + R + stored), false, 256 << 20, 0, "WARNING"},
		{"forced in-graph", set(TransposeInGraph, 0), mem(W + R + 10*stored), true, max(10*stored, 256<<20), 0, "update.transpose in-graph"},
		{"explicit cap", set(TransposeAuto, 3), mem(W + R + 10*stored), false, 0, 3 << 20, "update.max_compute_mib"},
		{"no cap", set(TransposeAuto, -1), mem(W + R + 10*stored), false, 0, -1, "not capped"},
	} {
		p, err := planEngine(c.cfg, lm, c.mem)
		if err != nil {
			t.Fatal(err)
		}
		if p.Weights != W || p.Stored != stored || p.Rollouts != R {
			t.Fatalf("%s: W %d S %d R %d, want %d %d %d", c.name, p.Weights, p.Stored, p.Rollouts, W, stored, R)
		}
		if p.InGraph != c.inGraph || p.Budget != c.budget || p.MaxCompute != c.max || !strings.Contains(p.Reason, c.reason) {
			t.Errorf("%s: in-graph %v budget %d max %d (%q); want %v %d %d (%q)", c.name, p.InGraph, p.Budget, p.MaxCompute, p.Reason,
				c.inGraph, c.budget, c.max, c.reason)
		}
		o := p.Options(1, "cpu")
		if o.TransposeInGraph != p.InGraph || o.ComputeBudgetBytes != p.Budget || o.MaxComputeBytes != p.MaxCompute {
			t.Errorf("%s: options %+v", c.name, o)
		}
	}
	gpu := set(TransposeAuto, 0)
	gpu.Device = "gpu"
	if p, err := planEngine(gpu, lm, mem(W+R)); err != nil || p.Budget != 0 || p.InGraph || p.Available.Bytes != 0 {
		t.Fatalf("device gpu: host memory must not decide: %+v %v", p, err)
	}
}

// TestTrainTransposeInGraph: a run with Wᵀ made in each graph trains
// exactly as one with stored copies (same losses, gradient norms and
// adapter, bit for bit: the in-graph copy holds the same values), and
// reports its plan; a compute cap too small for one sequence fails with
// cgo.ErrComputeCap naming the configuration key.
func TestTrainTransposeInGraph(t *testing.T) {
	model := testutil.ModelFile(t)
	run := func(sets ...string) (string, EnginePlan, error) {
		dir := filepath.Join(t.TempDir(), "run")
		var plan EnginePlan
		cfg := tinyRunConfig(t, model, "grpo", 2, sets...)
		_, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg, OnEngine: func(p EnginePlan) { plan = p }})
		return dir, plan, err
	}
	a, pa, err := run("update.transpose=stored")
	if err != nil {
		t.Fatal(err)
	}
	b, pb, err := run("update.transpose=in-graph")
	if err != nil {
		t.Fatal(err)
	}
	if pa.InGraph || !pb.InGraph || pa.Stored != pb.Stored || pa.Stored == 0 {
		t.Fatalf("plans: %+v / %+v", pa, pb)
	}
	ma, mb := readMetrics(t, a), readMetrics(t, b)
	if len(ma) != 2 || len(mb) != 2 {
		t.Fatalf("%d / %d metrics lines", len(ma), len(mb))
	}
	updates := 0.0
	for i := range ma {
		for _, f := range []string{"loss", "grad_norm", "approx_kl", "reward_mean", "trained_tokens"} {
			if ma[i][f] != mb[i][f] {
				t.Errorf("step %d %s: stored %v, in-graph %v", i+1, f, ma[i][f], mb[i][f])
			}
		}
		updates += ma[i]["updates"].(float64)
	}
	if updates == 0 {
		t.Fatal("no update ran: nothing compared")
	}
	fa, err := os.ReadFile(filepath.Join(a, "checkpoints/step-000002/adapter.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.ReadFile(filepath.Join(b, "checkpoints/step-000002/adapter.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if string(fa) != string(fb) {
		t.Fatal("the adapters after 2 steps differ")
	}

	_, _, err = run("update.max_compute_mib=1")
	if !errors.Is(err, cgo.ErrComputeCap) || !strings.Contains(err.Error(), "update.max_compute_mib") {
		t.Fatalf("a 1 MiB compute cap: %v", err)
	}
}
