package simtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gpucheck"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/modelgen"
)

// The stand-in computes with one CPU thread, as the CPU engines below, so
// that every value is computed in the same order: equal bit for bit.
func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	if err := llama.RegisterSimDevice(1); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func tinyModel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny-f32.gguf")
	if err := modelgen.Write(p, modelgen.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	return p
}

// batch: three sequences of different lengths (padding), every position
// trained, advantages of both signs, old log-probs at the current ones
// (ratio 1: the unclipped branch everywhere, so every token has a gradient).
func batch(t *testing.T, ref *cgo.Model) ([][]int32, []cgo.Sequence) {
	t.Helper()
	seqs := [][]int32{{5, 17, 200, 3, 99, 41, 7, 300, 12}, {1, 2, 3, 4, 5}, {450, 9, 77, 31, 8, 250, 6}}
	lp, err := ref.LogProbsBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	var out []cgo.Sequence
	for i, s := range seqs {
		q := cgo.Sequence{Tokens: s, Trained: make([]bool, len(s)), OldLogp: make([]float32, len(s)), Advantage: make([]float32, len(s))}
		for j := 1; j < len(s); j++ {
			q.Trained[j], q.OldLogp[j], q.Advantage[j] = true, lp[i][j], float32(1-i)
		}
		out = append(out, q)
	}
	return seqs, out
}

// TestEngineOnSim: the training engine on the stand-in (Device "gpu", own
// weights; and LoadShared on llama.cpp's weights offloaded to it, the token
// embedding left in host memory as llama.cpp does) gives the CPU engine's
// log-probs and LoRA gradients exactly. Before measure_graph put back the
// sources that the measuring scheduler rewrites, the device graph read
// never-filled copies of its inputs: get_rows aborted on garbage indices
// (on an H100: an illegal memory access, or wrong log-probs and zero
// gradients).
func TestEngineOnSim(t *testing.T) {
	path := tinyModel(t)
	lcfg := cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 3, RandomB: true}
	ref, err := cgo.Load(path, lcfg, cgo.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	seqs, b := batch(t, ref)
	obj := cgo.DefaultObjective()
	refLp, err := ref.LogProbsBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	refSt, err := ref.ForwardBackward(b, obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	refG, err := ref.Grads()
	if err != nil {
		t.Fatal(err)
	}

	lm, err := llama.LoadModel(path, llama.ModelParams{GPULayers: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	for name, load := range map[string]func() (*cgo.Model, error){
		"own":    func() (*cgo.Model, error) { return cgo.Load(path, lcfg, cgo.Options{Threads: 1, Device: "gpu"}) },
		"shared": func() (*cgo.Model, error) { return cgo.LoadShared(lm, lcfg, cgo.Options{Threads: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			m, err := load()
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if be := m.Info().Backend; be != llama.SimDevice {
				t.Fatalf("backend %s, want %s", be, llama.SimDevice)
			}
			lp, err := m.LogProbsBatch(seqs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range lp {
				if !slices.Equal(lp[i], refLp[i]) {
					t.Fatalf("sequence %d: log-probs %v, CPU %v", i, lp[i], refLp[i])
				}
			}
			st, err := m.ForwardBackward(b, obj, 0)
			if err != nil {
				t.Fatal(err)
			}
			if st.Loss != refSt.Loss || st.Tokens != refSt.Tokens {
				t.Errorf("loss %v over %d tokens, CPU %v over %d", st.Loss, st.Tokens, refSt.Loss, refSt.Tokens)
			}
			g, err := m.Grads()
			if err != nil {
				t.Fatal(err)
			}
			nonzero := false
			for i := range g {
				if !slices.Equal(g[i], refG[i]) {
					t.Fatalf("gradient of %s differs from the CPU's", m.Params()[i].Name)
				}
				nonzero = nonzero || slices.ContainsFunc(g[i], func(x float32) bool { return x != 0 })
			}
			if !nonzero {
				t.Fatal("all gradients are zero")
			}
			if s := m.MemoryBytes().Splits; s < 1 || (name == "shared" && s < 2) {
				t.Errorf("%d scheduler splits", s)
			}
		})
	}
}

// TestCheckTrainOnSim: `empo2 check train --device gpu --shared
// --compare-nodes` passes on the stand-in with zero differences at every
// node, and both the scheduler's own dump and the node capture show the
// device split receiving its inputs (the H100 run that found the defect
// showed one split with 0 inputs) and, on llama.cpp's weights, the token
// embedding's get_rows — the one op reading a host-memory weight — as the
// only node on the CPU.
func TestCheckTrainOnSim(t *testing.T) {
	res, err := gpucheck.Train(gpucheck.TrainConfig{Model: tinyModel(t), Device: "gpu", Threads: 1, Shared: true, Seed: 4, CompareNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass || len(res.Variants) != 2 {
		t.Fatalf("result %+v", res)
	}
	for _, v := range res.Variants {
		if v.Backend != llama.SimDevice || v.LogpMaxAbs != 0 || v.GradWorstRel != 0 {
			t.Errorf("%s: backend %s, Δlogp %v, grad rel %v", v.Name, v.Backend, v.LogpMaxAbs, v.GradWorstRel)
		}
		dev := v.Sched.Splits[len(v.Sched.Splits)-1]
		if dev.Backend != llama.SimDevice || dev.Inputs < 5 { // tokens, positions, mask, rows, targets (+ loss seed)
			t.Errorf("%s: device split %+v", v.Name, dev)
		}
		for _, c := range []*gpucheck.NodeComparison{v.Nodes.Forward, v.Nodes.Train} {
			if c.First != nil || c.Structure != "" || c.Compared == 0 || c.LogpWhole != 0 || c.LogpNodes != 0 {
				t.Fatalf("%s %s: %s", v.Name, c.Graph, c.Verdict)
			}
			for _, d := range c.List {
				onCPU := d.Op == "GET_ROWS" && d.Srcs[0] == "token_embd.weight" && v.Name == "shared"
				if d.Rel != 0 || (d.Backend == "CPU") != onCPU || !onCPU && d.Backend != llama.SimDevice {
					t.Fatalf("%s %s: %+v", v.Name, c.Graph, d)
				}
				// a device op reading a CPU input reads the scheduler's copy of it
				if d.Op == "GET_ROWS" && d.Backend == llama.SimDevice && !strings.HasPrefix(d.Srcs[1], llama.SimDevice+"#") {
					t.Fatalf("%s %s: %+v reads no copy of its indices", v.Name, c.Graph, d)
				}
			}
		}
	}
	own, shared := res.Variants[0].Sched, res.Variants[1].Sched
	if own.NSplits != 1 || len(own.CPUOps) != 0 {
		t.Errorf("own weights: %+v", own)
	}
	if shared.NSplits != 2 || shared.NodesByBackend["CPU"] != 1 || len(shared.CPUOps) != 1 || shared.CPUOps[0].Op != "GET_ROWS" {
		t.Errorf("shared weights: %+v", shared)
	}
}
