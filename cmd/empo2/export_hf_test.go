package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/empo2/empo2/modelgen"
)

// hfFolder is a transformers Qwen2ForCausalLM folder read with a minimal
// safetensors parser of this test (F32 only) and config.json.
type hfFolder struct {
	cfg struct {
		Hidden  int     `json:"hidden_size"`
		Inter   int     `json:"intermediate_size"`
		Layers  int     `json:"num_hidden_layers"`
		Heads   int     `json:"num_attention_heads"`
		KVHeads int     `json:"num_key_value_heads"`
		Vocab   int     `json:"vocab_size"`
		Theta   float64 `json:"rope_theta"`
		Eps     float64 `json:"rms_norm_eps"`
		Tie     bool    `json:"tie_word_embeddings"`
	}
	w map[string][]float64
}

func readHFFolder(t *testing.T, dir string) *hfFolder {
	t.Helper()
	h := &hfFolder{w: map[string][]float64{}}
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cb, &h.cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Dtype string `json:"dtype"`
			Off   [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Dtype != "F32" {
			t.Fatalf("%s: %s (%v)", name, raw, err)
		}
		v := make([]float64, (e.Off[1]-e.Off[0])/4)
		for i := range v {
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[e.Off[0]+4*i:])))
		}
		h.w[name] = v
	}
	return h
}

// linear is torch's nn.Linear: y = W·x (+ b) with W of shape [out, in],
// row-major.
func linear(w []float64, b []float64, x []float64) []float64 {
	in := len(x)
	out := make([]float64, len(w)/in)
	for o := range out {
		s := 0.0
		for i, xi := range x {
			s += w[o*in+i] * xi
		}
		if b != nil {
			s += b[o]
		}
		out[o] = s
	}
	return out
}

func rmsNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r * w[i]
	}
	return out
}

// rope applies transformers' rotary embedding (apply_rotary_pos_emb with
// rotate_half: the two halves of each head are the pair) at position pos.
func rope(x []float64, heads, dim int, pos int, theta float64) {
	for h := 0; h < heads; h++ {
		v := x[h*dim : (h+1)*dim]
		for j := 0; j < dim/2; j++ {
			ang := float64(pos) * math.Pow(theta, -2*float64(j)/float64(dim))
			c, s := math.Cos(ang), math.Sin(ang)
			x1, x2 := v[j], v[j+dim/2]
			v[j], v[j+dim/2] = x1*c-x2*s, x2*c+x1*s
		}
	}
}

// logits computes the last position's logits of Qwen2ForCausalLM as
// transformers' modeling_qwen2 defines it, in float64.
func (h *hfFolder) logits(ids []int32) []float64 {
	c := h.cfg
	d := c.Hidden / c.Heads
	emb := h.w["model.embed_tokens.weight"]
	xs := make([][]float64, len(ids))
	ks := make([][][]float64, c.Layers)
	vs := make([][][]float64, c.Layers)
	for t, id := range ids {
		x := append([]float64(nil), emb[int(id)*c.Hidden:(int(id)+1)*c.Hidden]...)
		for l := 0; l < c.Layers; l++ {
			p := "model.layers." + itoa(l) + "."
			hn := rmsNorm(x, h.w[p+"input_layernorm.weight"], c.Eps)
			q := linear(h.w[p+"self_attn.q_proj.weight"], h.w[p+"self_attn.q_proj.bias"], hn)
			k := linear(h.w[p+"self_attn.k_proj.weight"], h.w[p+"self_attn.k_proj.bias"], hn)
			v := linear(h.w[p+"self_attn.v_proj.weight"], h.w[p+"self_attn.v_proj.bias"], hn)
			rope(q, c.Heads, d, t, c.Theta)
			rope(k, c.KVHeads, d, t, c.Theta)
			ks[l], vs[l] = append(ks[l], k), append(vs[l], v)
			att := make([]float64, c.Hidden)
			for hq := 0; hq < c.Heads; hq++ {
				kh := hq / (c.Heads / c.KVHeads) // repeat_kv
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					dot := 0.0
					for j := 0; j < d; j++ {
						dot += q[hq*d+j] * ks[l][s][kh*d+j]
					}
					sc[s] = dot / math.Sqrt(float64(d))
					mx = math.Max(mx, sc[s])
				}
				z := 0.0
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					z += sc[s]
				}
				for s := range sc {
					for j := 0; j < d; j++ {
						att[hq*d+j] += sc[s] / z * vs[l][s][kh*d+j]
					}
				}
			}
			o := linear(h.w[p+"self_attn.o_proj.weight"], nil, att)
			for i := range x {
				x[i] += o[i]
			}
			hn = rmsNorm(x, h.w[p+"post_attention_layernorm.weight"], c.Eps)
			g := linear(h.w[p+"mlp.gate_proj.weight"], nil, hn)
			u := linear(h.w[p+"mlp.up_proj.weight"], nil, hn)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i] // SiLU(gate)·up
			}
			dn := linear(h.w[p+"mlp.down_proj.weight"], nil, g)
			for i := range x {
				x[i] += dn[i]
			}
		}
		xs[t] = x
	}
	xn := rmsNorm(xs[len(ids)-1], h.w["model.norm.weight"], c.Eps)
	head := h.w["lm_head.weight"]
	if c.Tie {
		head = emb
	}
	return linear(head, nil, xn)
}

func itoa(i int) string { return strconv.Itoa(i) }

// llamaLastLogits runs llama.cpp on model (+ adapter at scale 1) and
// returns the prompt's tokens and the logits after them.
func llamaLastLogits(t *testing.T, model, adapter, prompt string) ([]int32, []float32) {
	t.Helper()
	m, ctx := llamaWithAdapter(t, model, adapter, 128)
	ids, err := m.Tokenize(prompt, false, false)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := ctx.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	return ids, lg
}

// TestExportHFInterop runs the CLI as a user would: PEFT export and back is
// bit-exact, and the merged transformers folder, evaluated here with
// transformers' Qwen2 equations (nn.Linear [out, in] weights, NeoX
// rotate_half RoPE, GQA repeat_kv), gives llama.cpp's logits for base +
// adapter.
func TestExportHFInterop(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	cfg := modelgen.DefaultConfig()
	if err := modelgen.Write(model, cfg); err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(dir, "adapter.gguf")
	peft := filepath.Join(dir, "peft")
	back := filepath.Join(dir, "back.gguf")
	hf := filepath.Join(dir, "hf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "4", "--alpha", "8", "--random-b", "--seed", "2", "--out", adapter)
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--format", "peft", "--out", peft)
	for _, f := range []string{"adapter_model.safetensors", "adapter_config.json"} {
		if _, err := os.Stat(filepath.Join(peft, f)); err != nil {
			t.Fatalf("export --format peft: %v", err)
		}
	}
	loraMustCLI(t, "lora", "import", "--model", model, "--out", back, peft)
	x, _ := os.ReadFile(adapter)
	y, _ := os.ReadFile(back)
	if !bytes.Equal(x, y) {
		t.Fatalf("GGUF → PEFT → GGUF changed the adapter file (%d vs %d bytes)", len(x), len(y))
	}
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--format", "hf", "--merged", "--out", hf)

	const prompt = "You are in the kitchen. There is a stove."
	ids, withAdapter := llamaLastLogits(t, model, adapter, prompt)
	_, plain := llamaLastLogits(t, model, "", prompt)
	got := readHFFolder(t, hf).logits(ids)
	var diff, effect float64
	for i := range got {
		diff = math.Max(diff, math.Abs(got[i]-float64(withAdapter[i])))
		effect = math.Max(effect, math.Abs(float64(withAdapter[i]-plain[i])))
	}
	t.Logf("%d tokens: max |transformers-equations − llama.cpp| = %.2e; the adapter moves logits by up to %.2e", len(ids), diff, effect)
	if effect < 1e-2 {
		t.Fatalf("the adapter changes the logits by only %.2e: the comparison proves nothing", effect)
	}
	if diff > 1e-3 {
		t.Errorf("merged HF model's logits differ from llama.cpp base + adapter by %.2e (> 1e-3)", diff)
	}

	// Misuse gives clear errors.
	loraWantFail(t, []string{"--merged"}, "export", "--model", model, "--lora", adapter, "--format", "hf", "--out", filepath.Join(dir, "x"))
	loraWantFail(t, []string{"--format hf --merged"}, "export", "--model", model, "--lora", adapter, "--format", "peft", "--merged", "--out", filepath.Join(dir, "x"))
	loraWantFail(t, []string{"--format", "onnx"}, "export", "--model", model, "--lora", adapter, "--format", "onnx", "--out", filepath.Join(dir, "x"))
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	loraWantFail(t, []string{"not a directory"}, "export", "--model", model, "--lora", adapter, "--format", "peft", "--out", file, "--hf-base", "x")
	loraWantFail(t, []string{"argument"}, "lora", "import", "--model", model, "--out", filepath.Join(dir, "z.gguf"))
	loraWantFail(t, []string{"adapter_model.safetensors"}, "lora", "import", "--model", model, "--out", filepath.Join(dir, "z.gguf"), hf)
}
