package gpucheck

import (
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/cgo"
	"github.com/empo2/empo2/gguf"
)

var nodeSeqs = [][]int32{{5, 17, 200, 3, 99, 41, 7}, {1, 2, 3, 4}, {450, 9, 77, 31, 8}}

func loadCPU(t *testing.T, path string) *cgo.Model {
	t.Helper()
	m, err := cgo.Load(path, cgo.LoRAConfig{Rank: 4, Alpha: 8, Seed: 5, RandomB: true}, cgo.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// perturbed copies the F32 model at path with element k of tensor name
// increased by delta (the bytes patched in place: everything else identical).
func perturbed(t *testing.T, path, name string, k int, delta float32) string {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := f.Tensor(name)
	off := int64(f.DataOffset + ti.Offset)
	f.Close()
	if !ok || ti.Type != gguf.TypeF32 {
		t.Fatalf("%s: %v %v", name, ok, ti.Type)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := off + 4*int64(k)
	v := math.Float32frombits(binary.LittleEndian.Uint32(b[at:]))
	binary.LittleEndian.PutUint32(b[at:], math.Float32bits(v+delta))
	out := filepath.Join(t.TempDir(), "perturbed.gguf")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCaptureValues: the captured outputs are what the graph computes, against
// independent values: the token-embedding node equals token_embd's rows read
// from the file for the padded batch (slot t + T·b, padding token 0), and the
// node named "logp" equals the log-probs the call returns, which equal
// LogProbsBatch's; computing node by node changes nothing on the CPU.
func TestCaptureValues(t *testing.T) {
	path := tinyModel(t, "f32")
	m := loadCPU(t, path)
	c, err := m.Capture(nodeSeqs, cgo.CaptureConfig{Nodes: true})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := m.Capture(nodeSeqs, cgo.CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Nodes != nil || !slices.Equal(whole.Logp, c.Logp) || !slices.Equal(whole.Ent, c.Ent) {
		t.Fatal("node by node and in one go differ on the CPU")
	}
	lp, err := m.LogProbsBatch(nodeSeqs)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, s := range lp {
		want = append(want, s[1:]...)
	}
	if !slices.Equal(c.Logp, want) {
		t.Fatalf("Capture log-probs %v, LogProbsBatch %v", c.Logp, want)
	}

	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	emb, err := f.ReadTensorF32("token_embd.weight")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	C, T := m.Info().NEmbd, 7
	var sawEmb, sawLogp bool
	for i, n := range c.Nodes {
		if n.Index != i {
			t.Fatalf("node %d has index %d", i, n.Index)
		}
		switch {
		case n.Op == "GET_ROWS" && len(n.Srcs) > 0 && n.Srcs[0] == "token_embd.weight":
			sawEmb = true
			if n.Shape != [4]int64{int64(C), int64(T * len(nodeSeqs)), 1, 1} || len(n.Data) != C*T*len(nodeSeqs) {
				t.Fatalf("embedding node %+v with %d values", n, len(n.Data))
			}
			for b, s := range nodeSeqs {
				for tt := range T {
					tok := 0
					if tt < len(s) {
						tok = int(s[tt])
					}
					if !slices.Equal(n.Data[(tt+T*b)*C:(tt+T*b+1)*C], emb[tok*C:(tok+1)*C]) {
						t.Fatalf("slot %d of sequence %d: not token %d's embedding", tt, b, tok)
					}
				}
			}
		case n.Name == "logp":
			sawLogp = true
			if !slices.Equal(n.Data, c.Logp) {
				t.Fatalf("node logp %v, call %v", n.Data, c.Logp)
			}
		}
		if n.Backend != "CPU" || n.Backward {
			t.Fatalf("forward node %+v", n)
		}
	}
	if !sawEmb || !sawLogp {
		t.Fatalf("embedding node %v, logp node %v among %d nodes", sawEmb, sawLogp, len(c.Nodes))
	}
}

// TestCompareNodes: two CPU engines on the same weights agree exactly at
// every node, in both graphs, node by node and in one go. With one weight of
// blk.1.attn_v changed in the second engine's file, the first node reported
// is the first node of the graph that reads that weight (found in the
// reference's own capture) and every node before it is exact; the log-probs
// differ, and so do the gradients.
func TestCompareNodes(t *testing.T) {
	path := tinyModel(t, "f32")
	ref, same := loadCPU(t, path), loadCPU(t, path)
	tol := CompareConfig{Seed: 3, Tol: 1e-2, LogpTol: 1e-4, GradTol: 1e-3}
	for _, train := range []bool{false, true} {
		cfg := tol
		cfg.Train = train
		c, err := CompareNodes(ref, same, nodeSeqs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.Structure != "" || c.First != nil || c.Compared == 0 || c.Compared != len(c.List) || c.LogpWhole != 0 || c.LogpNodes != 0 ||
			!strings.Contains(c.Verdict, "every node within") {
			t.Fatalf("train %v: %+v", train, c)
		}
		for _, d := range c.List {
			if d.Rel != 0 || d.MaxAbs != 0 {
				t.Fatalf("train %v: %+v", train, d)
			}
		}
		if train != (c.GradWhole != nil) || train && (*c.GradWhole != 0 || *c.GradNodes != 0 || !slices.ContainsFunc(c.List, func(d NodeDiff) bool { return d.Backward })) {
			t.Fatalf("train %v: gradients %v %v", train, c.GradWhole, c.GradNodes)
		}
	}

	const weight = "blk.1.attn_v.weight"
	dev := loadCPU(t, perturbed(t, path, weight, 3, 1))
	rc, err := ref.Capture(nodeSeqs, cgo.CaptureConfig{Nodes: true})
	if err != nil {
		t.Fatal(err)
	}
	reader := -1
	for _, n := range rc.Nodes {
		if slices.Contains(n.Srcs, weight) {
			reader = n.Index
			break
		}
	}
	if reader < 0 {
		t.Fatalf("no node reads %s", weight)
	}
	for _, train := range []bool{false, true} {
		cfg := tol
		cfg.Train = train
		c, err := CompareNodes(ref, dev, nodeSeqs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.Structure != "" || c.First == nil || c.First.Index != reader || c.First.Op != "MUL_MAT" || c.First.Srcs[0] != weight ||
			!strings.Contains(c.Verdict, "first node beyond") || !strings.Contains(c.Verdict, weight) {
			t.Fatalf("train %v: first %+v (the first reader is node %d); %s", train, c.First, reader, c.Verdict)
		}
		for _, d := range c.List {
			if d.Index < reader && (d.Rel != 0 || d.MaxAbs != 0) {
				t.Fatalf("train %v: node %+v before the first reader differs", train, d)
			}
		}
		if c.LogpNodes == 0 || c.LogpWhole == 0 || train && *c.GradWhole == 0 {
			t.Fatalf("train %v: the perturbation does not reach the outputs: %+v", train, c)
		}
	}
}

// TestCaptureLogTee: at trace level the captured llama.cpp lines also reach
// stderr as they come (so that a crash inside the capture leaves them
// behind); at the usual levels they do not.
func TestCaptureLogTee(t *testing.T) {
	for _, lvl := range []zerolog.Level{zerolog.TraceLevel, zerolog.WarnLevel} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		oldErr, oldLvl := os.Stderr, zerolog.GlobalLevel()
		os.Stderr = w
		zerolog.SetGlobalLevel(lvl)
		lines, err := captureLog(func() error {
			log.Trace().Str("src", "llama.cpp").Msg("## SPLIT #0: CPU # 0 inputs")
			return nil
		})
		os.Stderr = oldErr
		zerolog.SetGlobalLevel(oldLvl)
		w.Close()
		got, _ := io.ReadAll(r)
		r.Close()
		if err != nil || len(lines) != 1 || lines[0] != "## SPLIT #0: CPU # 0 inputs" {
			t.Fatalf("level %v: captured %q, %v", lvl, lines, err)
		}
		if tee := strings.Contains(string(got), "## SPLIT #0"); tee != (lvl == zerolog.TraceLevel) {
			t.Errorf("level %v: stderr got %q", lvl, got)
		}
	}
}
