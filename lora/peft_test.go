package lora_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
	"github.com/empo2/empo2/modelgen"
	"github.com/empo2/empo2/safetensors"
)

// ---- an independent safetensors reader (written for these tests from the
// format description, sharing no code with package safetensors) ----

type stTensor struct {
	dtype string
	shape []int
	data  []byte
}

type stFile struct {
	meta    map[string]string
	tensors map[string]stTensor
}

func readST(t *testing.T, path string) stFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: %d bytes", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n%8 != 0 {
		t.Errorf("%s: header length %d is not 8-byte aligned", path, n)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	data := b[8+n:]
	f := stFile{tensors: map[string]stTensor{}}
	covered := 0
	for k, v := range hdr {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &f.meta); err != nil {
				t.Fatalf("metadata: %v", err)
			}
			continue
		}
		var e struct {
			Dtype   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets []int  `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		size := map[string]int{"F32": 4, "F16": 2, "BF16": 2}[e.Dtype]
		for _, d := range e.Shape {
			size *= d
		}
		if len(e.Offsets) != 2 || e.Offsets[1]-e.Offsets[0] != size || e.Offsets[1] > len(data) {
			t.Fatalf("%s: offsets %v for %s %v", k, e.Offsets, e.Dtype, e.Shape)
		}
		covered += size
		f.tensors[k] = stTensor{e.Dtype, e.Shape, data[e.Offsets[0]:e.Offsets[1]]}
	}
	if covered != len(data) {
		t.Errorf("%s: tensors cover %d of %d data bytes", path, covered, len(data))
	}
	return f
}

// f32s decodes a tensor to float32 (F16 by the IEEE half layout, BF16 as
// the top half of a float32).
func (s stTensor) f32s(t *testing.T) []float32 {
	t.Helper()
	var out []float32
	switch s.dtype {
	case "F32":
		for i := 0; i < len(s.data); i += 4 {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(s.data[i:])))
		}
	case "BF16":
		for i := 0; i < len(s.data); i += 2 {
			out = append(out, math.Float32frombits(uint32(binary.LittleEndian.Uint16(s.data[i:]))<<16))
		}
	case "F16":
		for i := 0; i < len(s.data); i += 2 {
			h := binary.LittleEndian.Uint16(s.data[i:])
			sign, exp, frac := float64(1), int(h>>10&0x1f), float64(h&0x3ff)
			if h&0x8000 != 0 {
				sign = -1
			}
			var v float64
			switch exp {
			case 0:
				v = sign * frac / 1024 * math.Pow(2, -14)
			case 31:
				v = math.Inf(int(sign))
			default:
				v = sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
			}
			out = append(out, float32(v))
		}
	default:
		t.Fatalf("dtype %s", s.dtype)
	}
	return out
}

// ---- fixtures ----

func tinyBase(t *testing.T, edit func(*modelgen.Config)) (string, *gguf.File) {
	t.Helper()
	cfg := modelgen.DefaultConfig() // 2 layers, hidden 64, 4 heads, 2 kv heads (kv dim 32), ffn 128, vocab 512
	if edit != nil {
		edit(&cfg)
	}
	p := filepath.Join(t.TempDir(), "base.gguf")
	if err := modelgen.Write(p, cfg); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f
}

func initAdapter(t *testing.T, base *gguf.File, rank int, alpha float32, targets []string, seed uint64) *lora.Adapter {
	t.Helper()
	a, err := lora.Init(base, lora.InitConfig{Rank: rank, Alpha: alpha, Targets: targets, Seed: seed, RandomB: true})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// hfDims are the [out, in] of every adapted projection of the default
// modelgen config, written down from the Qwen2 architecture (not computed
// by the code under test).
var hfDims = map[string][2]int{
	"self_attn.q_proj": {64, 64}, "self_attn.k_proj": {32, 64}, "self_attn.v_proj": {32, 64},
	"self_attn.o_proj": {64, 64}, "mlp.gate_proj": {128, 64}, "mlp.up_proj": {128, 64}, "mlp.down_proj": {64, 128},
}

var llamaToHF = map[string]string{
	"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
	"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestPEFTExportLayout: names, orientation, dtypes, scaling and config of
// an exported PEFT adapter, read back with the independent reader.
func TestPEFTExportLayout(t *testing.T) {
	_, base := tinyBase(t, nil)
	a := initAdapter(t, base, 4, 8, nil, 3)
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16} {
		dir := filepath.Join(t.TempDir(), "peft-"+string(dt))
		if err := lora.ExportPEFT(a, base, dir, lora.PEFTOptions{DType: dt, BaseModel: "Qwen/Qwen2.5-7B-Instruct"}); err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		readJSON(t, filepath.Join(dir, "adapter_config.json"), &cfg)
		for k, want := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 8.0,
			"base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "bias": "none", "use_rslora": false, "use_dora": false, "fan_in_fan_out": false} {
			if cfg[k] != want {
				t.Errorf("%s: adapter_config %s = %v, want %v", dt, k, cfg[k], want)
			}
		}
		tm := fmt.Sprint(cfg["target_modules"])
		if tm != "[down_proj gate_proj k_proj o_proj q_proj up_proj v_proj]" {
			t.Errorf("target_modules %s", tm)
		}
		// PEFT's scale lora_alpha/r equals llama.cpp's alpha/r.
		if s := cfg["lora_alpha"].(float64) / cfg["r"].(float64); float32(s) != a.Scale(4) {
			t.Errorf("PEFT scale %v, llama.cpp scale %v", s, a.Scale(4))
		}
		st := readST(t, filepath.Join(dir, "adapter_model.safetensors"))
		if st.meta["format"] != "pt" {
			t.Errorf("metadata %v lacks format=pt", st.meta)
		}
		if len(st.tensors) != 2*7*2 {
			t.Errorf("%d tensors, want 28", len(st.tensors))
		}
		for _, p := range a.Pairs {
			l, short, ok := lora.ParseBase(p.Base)
			if !ok {
				t.Fatalf("pair %s", p.Base)
			}
			mod := llamaToHF[lora.TargetTensors[short]]
			name := fmt.Sprintf("base_model.model.model.layers.%d.%s", l, mod)
			ta, okA := st.tensors[name+".lora_A.weight"]
			tb, okB := st.tensors[name+".lora_B.weight"]
			if !okA || !okB {
				t.Fatalf("%s: missing lora_A/lora_B under %s", p.Base, name)
			}
			d := hfDims[mod]
			if fmt.Sprint(ta.shape) != fmt.Sprint([]int{4, d[1]}) || fmt.Sprint(tb.shape) != fmt.Sprint([]int{d[0], 4}) {
				t.Errorf("%s: lora_A %v lora_B %v, want [r=4, in=%d] and [out=%d, r=4]", name, ta.shape, tb.shape, d[1], d[0])
			}
			if ta.dtype != string(dt) || tb.dtype != string(dt) {
				t.Errorf("%s: dtypes %s/%s, want %s", name, ta.dtype, tb.dtype, dt)
			}
			// Values: A[k][i] = p.A[k*In+i], B[o][k] = p.B[o*Rank+k], rounded to dt.
			ga, gb := ta.f32s(t), tb.f32s(t)
			for i := range p.A {
				if !sameRounded(ga[i], p.A[i], dt) {
					t.Fatalf("%s lora_A[%d] = %v, want %v (%s)", name, i, ga[i], p.A[i], dt)
				}
			}
			for i := range p.B {
				if !sameRounded(gb[i], p.B[i], dt) {
					t.Fatalf("%s lora_B[%d] = %v, want %v (%s)", name, i, gb[i], p.B[i], dt)
				}
			}
		}
	}
}

// sameRounded: got is want rounded to dt (F32 exact; F16/BF16 within half
// an ulp of their precision).
func sameRounded(got, want float32, dt safetensors.DType) bool {
	switch dt {
	case safetensors.F32:
		return math.Float32bits(got) == math.Float32bits(want)
	case safetensors.F16:
		return math.Abs(float64(got-want)) <= math.Abs(float64(want))/2048+3e-8
	}
	return math.Abs(float64(got-want)) <= math.Abs(float64(want))/256
}

// TestPEFTRoundTripBitExact: GGUF → PEFT → GGUF gives the identical file,
// for F32 and F16 adapters, alpha 0 (llama.cpp scale 1), mixed ranks and
// a subset of targets and layers.
func TestPEFTRoundTripBitExact(t *testing.T) {
	basePath, base := tinyBase(t, nil)
	_ = basePath
	mixed := initAdapter(t, base, 4, 16, []string{"q", "v"}, 1)
	other := initAdapter(t, base, 2, 16, []string{"down"}, 2)
	for _, p := range other.Pairs {
		if strings.HasPrefix(p.Base, "blk.1.") { // ffn_down adapted in block 1 only, rank 2
			mixed.Pairs = append(mixed.Pairs, p)
		}
	}
	mixed.Sort()
	mixed.Meta["general.name"] = "round trip"
	cases := []struct {
		name string
		a    *lora.Adapter
		typ  gguf.GGMLType
		dt   safetensors.DType
	}{
		{"f32", initAdapter(t, base, 8, 16, nil, 7), gguf.TypeF32, safetensors.F32},
		{"f16", initAdapter(t, base, 8, 16, nil, 8), gguf.TypeF16, safetensors.F16},
		{"alpha0", initAdapter(t, base, 4, 0, nil, 9), gguf.TypeF32, safetensors.F32},
		{"mixed", mixed, gguf.TypeF32, safetensors.F32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			orig := filepath.Join(dir, "orig.gguf")
			if err := c.a.Write(orig, c.typ); err != nil {
				t.Fatal(err)
			}
			a, err := lora.Read(orig)
			if err != nil {
				t.Fatal(err)
			}
			peft := filepath.Join(dir, "peft")
			if err := lora.ExportPEFT(a, base, peft, lora.PEFTOptions{DType: c.dt}); err != nil {
				t.Fatal(err)
			}
			back, notes, err := lora.ImportPEFT(peft, base)
			if err != nil {
				t.Fatal(err)
			}
			if len(notes) != 0 {
				t.Errorf("notes on a round trip: %v", notes)
			}
			again := filepath.Join(dir, "back.gguf")
			if err := back.Write(again, c.typ); err != nil {
				t.Fatal(err)
			}
			x, _ := os.ReadFile(orig)
			y, _ := os.ReadFile(again)
			if !bytes.Equal(x, y) {
				t.Fatalf("round trip changed the file (%d vs %d bytes)", len(x), len(y))
			}
			var cfg map[string]any
			readJSON(t, filepath.Join(peft, "adapter_config.json"), &cfg)
			switch c.name {
			case "alpha0":
				if cfg["lora_alpha"] != 4.0 {
					t.Errorf("alpha 0 (scale 1) exported as lora_alpha %v, want r = 4", cfg["lora_alpha"])
				}
			case "mixed":
				if fmt.Sprint(cfg["rank_pattern"]) != "map[model.layers.1.mlp.down_proj:2]" {
					t.Errorf("rank_pattern %v", cfg["rank_pattern"])
				}
				if fmt.Sprint(cfg["target_modules"]) != "[model.layers.1.mlp.down_proj q_proj v_proj]" {
					t.Errorf("target_modules %v", cfg["target_modules"])
				}
			}
		})
	}
}

// writePEFT writes a hand-made PEFT folder: config JSON and F32 tensors.
func writePEFT(t *testing.T, cfg string, tensors map[string][]float32, shapes map[string][]int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w := safetensors.NewWriter()
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.AddF32(n, safetensors.F32, shapes[n], tensors[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(filepath.Join(dir, "adapter_model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fill(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v * float32(i%7-3)
	}
	return s
}

// TestPEFTImportScaling: PEFT scales that one llama.cpp alpha cannot give
// (alpha_pattern, rsLoRA) are folded into B, so the effective update
// s·B·A is PEFT's.
func TestPEFTImportScaling(t *testing.T) {
	_, base := tinyBase(t, nil)
	const q, v = "base_model.model.model.layers.0.self_attn.q_proj", "base_model.model.model.layers.0.self_attn.v_proj"
	tensors := map[string][]float32{q + ".lora_A.weight": fill(4*64, 0.1), q + ".lora_B.weight": fill(64*4, 0.2),
		v + ".lora_A.weight": fill(4*64, 0.3), v + ".lora_B.weight": fill(32*4, 0.4)}
	shapes := map[string][]int64{q + ".lora_A.weight": {4, 64}, q + ".lora_B.weight": {64, 4},
		v + ".lora_A.weight": {4, 64}, v + ".lora_B.weight": {32, 4}}
	// alpha_pattern: v_proj gets alpha 32 (scale 8), q_proj lora_alpha 8 (scale 2).
	dir := writePEFT(t, `{"peft_type":"LORA","r":4,"lora_alpha":8,"alpha_pattern":{"v_proj":32},"target_modules":["q_proj","v_proj"]}`, tensors, shapes)
	a, notes, err := lora.ImportPEFT(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if a.Alpha != 8 || len(notes) != 1 || !strings.Contains(notes[0], "attn_v") {
		t.Fatalf("alpha %v notes %v", a.Alpha, notes)
	}
	wantScale := map[string]float64{"blk.0.attn_q.weight": 2, "blk.0.attn_v.weight": 8}
	src := map[string]string{"blk.0.attn_q.weight": q, "blk.0.attn_v.weight": v}
	for _, p := range a.Pairs {
		// effective update: Scale(r)·B must equal PEFT's s·B
		b := tensors[src[p.Base]+".lora_B.weight"]
		for i := range p.B {
			got := float64(a.Scale(p.Rank)) * float64(p.B[i])
			if want := wantScale[p.Base] * float64(b[i]); math.Abs(got-want) > 1e-6*math.Abs(want)+1e-12 {
				t.Fatalf("%s: s·B[%d] = %v, want %v", p.Base, i, got, want)
			}
		}
		if !bytes.Equal(f32bytes(p.A), f32bytes(tensors[src[p.Base]+".lora_A.weight"])) {
			t.Errorf("%s: A changed", p.Base)
		}
	}
	// rsLoRA: scale lora_alpha/√r = 8/2 = 4 → alpha 16 for r 4.
	dir = writePEFT(t, `{"peft_type":"LORA","r":4,"lora_alpha":8,"use_rslora":true}`, tensors, shapes)
	if a, notes, err = lora.ImportPEFT(dir, base); err != nil || a.Alpha != 16 || len(notes) != 0 {
		t.Fatalf("rsLoRA: alpha %v notes %v err %v", a.Alpha, notes, err)
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestPEFTImportErrors: what a llama.cpp LoRA cannot express, and broken
// files, give typed errors.
func TestPEFTImportErrors(t *testing.T) {
	_, base := tinyBase(t, nil)
	const q = "base_model.model.model.layers.0.self_attn.q_proj"
	good := map[string][]float32{q + ".lora_A.weight": fill(4*64, 0.1), q + ".lora_B.weight": fill(64*4, 0.2)}
	shapes := map[string][]int64{q + ".lora_A.weight": {4, 64}, q + ".lora_B.weight": {64, 4}}
	for _, c := range []struct {
		name, cfg string
		tensors   map[string][]float32
		shapes    map[string][]int64
		want      error
	}{
		{"dora", `{"peft_type":"LORA","use_dora":true}`, good, shapes, lora.ErrUnsupported},
		{"prefix", `{"peft_type":"PREFIX_TUNING"}`, good, shapes, lora.ErrUnsupported},
		{"modules_to_save", `{"peft_type":"LORA","modules_to_save":["lm_head"]}`, good, shapes, lora.ErrUnsupported},
		{"bias", `{"peft_type":"LORA","bias":"all"}`, good, shapes, lora.ErrUnsupported},
		{"bad json", `{"peft_type":`, good, shapes, lora.ErrInvalid},
		{"half", `{"peft_type":"LORA"}`, map[string][]float32{q + ".lora_A.weight": good[q+".lora_A.weight"]}, shapes, lora.ErrInvalid},
		{"transposed", `{"peft_type":"LORA"}`, good, map[string][]int64{q + ".lora_A.weight": {64, 4}, q + ".lora_B.weight": {4, 64}}, lora.ErrMismatch},
		{"wrong base", `{"peft_type":"LORA"}`, map[string][]float32{q + ".lora_A.weight": fill(4*32, 1), q + ".lora_B.weight": fill(64*4, 1)},
			map[string][]int64{q + ".lora_A.weight": {4, 32}, q + ".lora_B.weight": {64, 4}}, lora.ErrMismatch},
		{"unknown module", `{"peft_type":"LORA"}`, map[string][]float32{"base_model.model.model.layers.0.self_attn.rotary.lora_A.weight": fill(4, 1),
			"base_model.model.model.layers.0.self_attn.rotary.lora_B.weight": fill(4, 1)},
			map[string][]int64{"base_model.model.model.layers.0.self_attn.rotary.lora_A.weight": {1, 4}, "base_model.model.model.layers.0.self_attn.rotary.lora_B.weight": {4, 1}}, lora.ErrUnsupported},
		{"not lora", `{"peft_type":"LORA"}`, map[string][]float32{"model.embed_tokens.weight": fill(4, 1)}, map[string][]int64{"model.embed_tokens.weight": {4}}, lora.ErrNotAdapter},
	} {
		dir := writePEFT(t, c.cfg, c.tensors, c.shapes)
		if _, _, err := lora.ImportPEFT(dir, base); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	// a truncated safetensors file
	dir := writePEFT(t, `{"peft_type":"LORA"}`, good, shapes)
	p := filepath.Join(dir, "adapter_model.safetensors")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-3], 0o644)
	if _, _, err := lora.ImportPEFT(dir, base); !errors.Is(err, safetensors.ErrCorrupt) {
		t.Errorf("truncated: err %v, want safetensors.ErrCorrupt", err)
	}
	// no adapter at all
	if _, _, err := lora.ImportPEFT(t.TempDir(), base); err == nil {
		t.Error("an empty folder was imported")
	}
}
