package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/qwentok"
	"github.com/empo2/empo2/modelgen"
)

func TestModelInitAndInfo(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny.gguf")
	stdout, stderr, err := runCLI(t, "model", "init", "--out", out, "--seed", "3")
	if err != nil {
		t.Fatalf("model init: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "139,840 parameters") {
		t.Fatalf("init output %q lacks the parameter count", stdout)
	}
	stdout, stderr, err = runCLI(t, "model", "info", out)
	if err != nil {
		t.Fatalf("model info: %v\n%s", err, stderr)
	}
	for _, want := range []string{"architecture:   qwen2", "ALL_F32", "139,840", "layers:         2", "kv 2, head dim 16", "context:        2048",
		"gpt2, pre qwen2, 512 tokens", "<|im_start|>", "ChatML"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, stdout)
		}
	}
	// same flags and seed → same bytes
	out2 := filepath.Join(dir, "tiny2.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", out2, "--seed", "3"); err != nil {
		t.Fatalf("second init: %v\n%s", err, stderr)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		t.Fatal("two inits with the same seed differ")
	}
}

func TestModelInitFlagsAndInfoJSON(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("open the chest, take the lantern. ", 40)), 0o644)
	out := filepath.Join(dir, "m.gguf")
	_, stderr, err := runCLI(t, "model", "init", "--out", out, "--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1",
		"--ffn", "48", "--vocab", "300", "--ctx", "128", "--dtype", "f16", "--tied", "--corpus", corpus, "--name", "t1")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	stdout, stderr, err := runCLI(t, "model", "info", "--json", "--tensors", out)
	if err != nil {
		t.Fatalf("info --json: %v\n%s", err, stderr)
	}
	var r modelInfoReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if r.Architecture != "qwen2" || r.Name != "t1" || r.FileType != "MOSTLY_F16" || r.Hyper == nil ||
		r.Hyper.Layers != 1 || r.Hyper.Hidden != 32 || r.Hyper.Heads != 2 || r.Hyper.KVHeads != 1 || r.Hyper.FFN != 48 || r.Hyper.Context != 128 {
		t.Fatalf("report %+v hyper %+v", r, r.Hyper)
	}
	if r.Tokenizer == nil || r.Tokenizer.Tokens != 300 || r.Tokenizer.Pre != "qwen2" || r.Tokenizer.Specials["eos"] == 0 {
		t.Fatalf("tokenizer %+v", r.Tokenizer)
	}
	if !strings.Contains(r.ChatTemplate, "<|im_start|>assistant") {
		t.Fatal("JSON lacks the chat template")
	}
	if r.TensorTypes["F16"] != 1+1*7 || len(r.TensorList) != r.Tensors {
		t.Fatalf("tensor types %v, %d listed of %d", r.TensorTypes, len(r.TensorList), r.Tensors)
	}
	for _, ti := range r.TensorList {
		if ti.Name == "output.weight" {
			t.Fatal("--tied model has output.weight")
		}
	}
}

func TestModelErrors(t *testing.T) {
	dir := t.TempDir()
	notGGUF := filepath.Join(dir, "notes.txt")
	os.WriteFile(notGGUF, []byte("just some text, not a model"), 0o644)
	good := filepath.Join(dir, "good.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", good); err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	full, _ := os.ReadFile(good)
	truncated := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(truncated, full[:len(full)/2], 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"model", "info", filepath.Join(dir, "missing.gguf")}, "no such file"},
		{[]string{"model", "info", notGGUF}, "not a GGUF file"},
		{[]string{"model", "info", truncated}, "truncated"},
		{[]string{"model", "info"}, "exactly one FILE"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--heads", "3"}, "must divide hidden"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--dtype", "q4"}, "dtype"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--vocab", "100"}, "vocab"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "x.gguf"), "--corpus", filepath.Join(dir, "none.txt")}, "corpus"},
		{[]string{"model", "init"}, "out"},
		{[]string{"model", "init", "--out", filepath.Join(dir, "no-such-dir", "x.gguf")}, "no such file"},
	}
	for _, c := range cases {
		_, stderr, err := runCLI(t, c.args...)
		if err == nil {
			t.Errorf("%v: exit status 0", c.args)
			continue
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, stderr, c.want)
		}
		if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
			t.Errorf("%v: crashed:\n%s", c.args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("a failed init left a file")
	}
}

func TestModelInitBERT(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bert.gguf")
	stdout, stderr, err := runCLI(t, "model", "init", "--arch", "bert", "--out", out, "--layers", "1", "--vocab", "600", "--ctx", "64")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "bert, 1 layers") {
		t.Fatalf("init output %q", stdout)
	}
	stdout, stderr, err = runCLI(t, "model", "info", out)
	if err != nil {
		t.Fatalf("info: %v\n%s", err, stderr)
	}
	for _, want := range []string{"architecture:   bert", "layers:         1", "heads:          4 (kv 4, head dim 16)", "context:        64",
		"causal:         false", "pooling:        mean", "norm eps:       1e-12", "bert, 600 tokens", "[CLS]", "chat template:  none"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, stdout)
		}
	}
	for _, args := range [][]string{{"--tied"}, {"--kv-heads", "1"}, {"--arch", "gpt9"}, {"--hidden", "30"}} {
		if _, stderr, err := runCLI(t, append([]string{"model", "init", "--arch", "bert", "--out", filepath.Join(dir, "x.gguf")}, args...)...); err == nil {
			t.Errorf("%v accepted", args)
		} else if !strings.Contains(stderr, "model init") {
			t.Errorf("%v: stderr %q", args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("a refused init wrote a file")
	}
}

// tokenizeCLI runs `empo2 model tokenize --json` and returns the ids.
func tokenizeCLI(t *testing.T, model, text string, extra ...string) []int32 {
	t.Helper()
	args := append(append([]string{"model", "tokenize", "-m", model, "--json"}, extra...), "--", text)
	stdout, stderr, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("model tokenize: %v\n%s", err, stderr)
	}
	var r struct {
		IDs    []int32  `json:"ids"`
		Pieces []string `json:"pieces"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || len(r.IDs) != len(r.Pieces) {
		t.Fatalf("tokenize output %q: %v", stdout, err)
	}
	return r.IDs
}

// TestModelTokenize: ids and pieces of the trained tiny model, equal to
// modelgen's own encoder; control tokens parsed unless --no-special; text
// from standard input; the human-readable form.
func TestModelTokenize(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", model); err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	tok, err := modelgen.DefaultConfig().Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text := "> go to the kitchen\nopen door"
	if got, want := tokenizeCLI(t, model, text), tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("ids %v, modelgen %v", got, want)
	}
	imStart, _ := tok.ID(modelgen.TokImStart)
	if got := tokenizeCLI(t, model, "<|im_start|>"); !slices.Equal(got, []int32{imStart}) {
		t.Errorf("special parsed: %v", got)
	}
	if got := tokenizeCLI(t, model, "<|im_start|>", "--no-special"); slices.Contains(got, imStart) || len(got) < 2 {
		t.Errorf("--no-special: %v", got)
	}
	cmd := exec.Command(binPath, "model", "tokenize", "-m", model)
	cmd.Stdin = strings.NewReader("open door")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, id := range tok.Encode("open door") {
		lines = append(lines, fmt.Sprintf("%6d -> '%s'", id, tok.Decode([]int32{id})))
	}
	if strings.TrimRight(string(out), "\n") != strings.Join(lines, "\n") {
		t.Errorf("stdin, human form:\n%s\nwant\n%s", out, strings.Join(lines, "\n"))
	}
	if _, stderr, err := runCLI(t, "model", "tokenize", "-m", filepath.Join(dir, "missing.gguf"), "--", "x"); err == nil || !strings.Contains(stderr, "model tokenize") {
		t.Errorf("missing model: %v %s", err, stderr)
	}
}

// TestModelQwenTokenizerCLI runs the real Qwen tokenizer through the CLI:
// `model init --tokenizer --preset` with smaller dimensions (the preset's
// vocabulary size, tied embeddings and config.json BOS kept), `model info`,
// `model tokenize` against the fixture ids, then `export --format hf`
// carrying the tokenizer files unchanged — and, for a GGUF that stores no
// files (as llama.cpp's converter writes it), an export whose generated
// tokenizer converts back to the identical vocabulary and the fixture ids.
func TestModelQwenTokenizerCLI(t *testing.T) {
	tokDir := qwentok.Dir(t)
	fx := qwentok.Fixtures(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "q.gguf")
	stdout, stderr, err := runCLI(t, "model", "init", "--out", model, "--tokenizer", tokDir, "--preset", "qwen2.5-0.5b",
		"--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--ctx", "512")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "vocab 151936, ctx 512, tied") || !strings.Contains(stdout, "pre qwen2, 151669 tokens + 267 padding") {
		t.Errorf("init output %q", stdout)
	}
	stdout, stderr, err = runCLI(t, "model", "info", "--json", model)
	if err != nil {
		t.Fatalf("info: %v\n%s", err, stderr)
	}
	var r modelInfoReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join(tokDir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tcj struct {
		ChatTemplate string `json:"chat_template"`
	}
	json.Unmarshal(tc, &tcj)
	sp := r.Tokenizer.Specials
	if r.Tokenizer.Tokens != 151936 || r.Tokenizer.Pre != "qwen2" || sp["bos"] != 151643 || sp["eos"] != 151645 || sp["padding"] != 151643 ||
		len(sp) != 3 || !slices.Contains(r.Tokenizer.Control, "<|fim_prefix|>") || slices.Contains(r.Tokenizer.Control, "<think>") ||
		r.ChatTemplate != tcj.ChatTemplate || r.Hyper.Layers != 2 || r.Hyper.Context != 512 {
		t.Errorf("info: %+v %+v template equal %v", r.Tokenizer, r.Hyper, r.ChatTemplate == tcj.ChatTemplate)
	}

	// a few fixtures, and every one with a special token written in it (each
	// run loads the 152k vocabulary; llama's TestQwenVocabFixtures checks all)
	for i, f := range fx {
		if i%80 != 0 && !strings.Contains(f.Text, "<|") {
			continue
		}
		if got := tokenizeCLI(t, model, f.Text); !slices.Equal(got, f.IDs) {
			t.Errorf("fixture %d %.50q:\n got  %v\n want %v", i, f.Text, got, f.IDs)
		}
	}

	// export: the tokenizer files byte for byte, nothing generated beside them
	adapter := filepath.Join(dir, "a.gguf")
	loraMustCLI(t, "lora", "init", "--model", model, "--rank", "2", "--random-b", "--out", adapter)
	hf := filepath.Join(dir, "hf")
	os.MkdirAll(hf, 0o755)
	os.WriteFile(filepath.Join(hf, "vocab.json"), []byte("{}"), 0o644) // left by an earlier export
	// replacing an existing export's files takes --force (issue 38 §2)
	loraMustCLI(t, "export", "--model", model, "--lora", adapter, "--format", "hf", "--merged", "--out", hf, "--force")
	sameFiles(t, tokDir, hf, "tokenizer.json", "tokenizer_config.json")
	for _, name := range []string{"vocab.json", "merges.txt", "special_tokens_map.json"} {
		if _, err := os.Stat(filepath.Join(hf, name)); err == nil {
			t.Errorf("%s written beside the original tokenizer", name)
		}
	}
	var cfg struct {
		Vocab int  `json:"vocab_size"`
		Tie   bool `json:"tie_word_embeddings"`
		BOS   int  `json:"bos_token_id"`
		EOS   int  `json:"eos_token_id"`
	}
	cb, _ := os.ReadFile(filepath.Join(hf, "config.json"))
	if err := json.Unmarshal(cb, &cfg); err != nil || cfg.Vocab != 151936 || !cfg.Tie || cfg.BOS != 151643 || cfg.EOS != 151645 {
		t.Errorf("config.json %+v %v", cfg, err)
	}

	// A GGUF without the files, as llama.cpp's converter writes one.
	tok, err := modelgen.LoadHFTokenizer(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	tok.Files = nil
	mc := modelgen.DefaultConfig()
	mc.HFTokenizer, mc.Vocab, mc.TiedEmbeddings = tok, 151936, true
	conv := filepath.Join(dir, "converted.gguf")
	if err := modelgen.Write(conv, mc); err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(dir, "hf-generated")
	loraMustCLI(t, "export", "--model", conv, "--lora", adapter, "--format", "hf", "--merged", "--out", gen)
	if a, _ := os.ReadFile(filepath.Join(gen, "tokenizer.json")); bytes.Equal(a, mustRead(t, filepath.Join(tokDir, "tokenizer.json"))) {
		t.Fatal("the generated tokenizer.json is the original")
	}
	// the generated files convert to exactly the GGUF's vocabulary, so they
	// tokenize as it does: the same fixture ids through a model made from them
	back, err := modelgen.LoadHFTokenizer(gen)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := gguf.Open(conv)
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	if err := back.Matches(cf); err != nil {
		t.Error(err)
	}
	round := filepath.Join(dir, "round.gguf")
	loraMustCLI(t, "model", "init", "--out", round, "--tokenizer", gen, "--tied")
	for i, f := range fx {
		if i != 1 && !strings.Contains(f.Text, "<|im_start|>") {
			continue
		}
		if got := tokenizeCLI(t, round, f.Text); !slices.Equal(got, f.IDs) {
			t.Errorf("round trip, fixture %d %.50q:\n got  %v\n want %v", i, f.Text, got, f.IDs)
		}
	}
	// with --tokenizer, the originals again; never into the tokenizer's folder
	orig := filepath.Join(dir, "hf-orig")
	loraMustCLI(t, "export", "--model", conv, "--lora", adapter, "--format", "hf", "--merged", "--out", orig, "--tokenizer", tokDir)
	sameFiles(t, tokDir, orig, "tokenizer.json", "tokenizer_config.json")
	if _, stderr, err := runCLI(t, "export", "--model", conv, "--lora", adapter, "--format", "hf", "--merged", "--out", orig, "--tokenizer", orig); err == nil ||
		!strings.Contains(stderr, "--tokenizer") {
		t.Errorf("--out is the --tokenizer folder: %v\n%s", err, stderr)
	}
	// … and not for a model whose vocabulary is another
	tiny := filepath.Join(dir, "tiny.gguf")
	loraMustCLI(t, "model", "init", "--out", tiny)
	tinyA := filepath.Join(dir, "tiny-a.gguf")
	loraMustCLI(t, "lora", "init", "--model", tiny, "--rank", "2", "--out", tinyA)
	if _, stderr, err := runCLI(t, "export", "--model", tiny, "--lora", tinyA, "--format", "hf", "--merged", "--out", filepath.Join(dir, "bad"), "--tokenizer", tokDir); err == nil ||
		!strings.Contains(stderr, "differs from the tokenizer files") {
		t.Errorf("mismatched --tokenizer: %v\n%s", err, stderr)
	}
}

// TestModelInitPresetAndTokenizerErrors: bad presets and tokenizer folders,
// and combinations that do not apply, are refused before anything is written.
func TestModelInitPresetAndTokenizerErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.gguf")
	corpus := filepath.Join(dir, "c.txt")
	os.WriteFile(corpus, []byte("some words here"), 0o644)
	tokDir := filepath.Join(dir, "tok")
	os.MkdirAll(tokDir, 0o755)
	os.WriteFile(filepath.Join(tokDir, "tokenizer_config.json"), []byte("{}"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "qwen9"}, "want one of qwen2.5-0.5b"},
		{[]string{"--tokenizer", dir}, "no tokenizer.json"},
		{[]string{"--tokenizer", filepath.Join(dir, "nope")}, "--tokenizer"},
		{[]string{"--tokenizer", dir, "--corpus", corpus}, "give one of them"},
		{[]string{"--preset", "qwen2.5-0.5b", "--arch", "bert"}, "applies to --arch qwen2"},
		{[]string{"--preset", "qwen2.5-7b", "--max-size", "1GiB"}, "above --max-size"},
		{[]string{"--tokenizer", tokDir, "--out", filepath.Join(tokDir, "tokenizer_config.json")}, "would overwrite the input --tokenizer"},
	} {
		_, stderr, err := runCLI(t, append([]string{"model", "init", "--out", out}, c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v, stderr %q (want %q)", c.args, err, stderr, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused init wrote a file")
	}
	if b, _ := os.ReadFile(filepath.Join(tokDir, "tokenizer_config.json")); string(b) != "{}" {
		t.Error("init overwrote the tokenizer")
	}
}

// TestModelInitPresetShapes: each preset's dimensions as its real
// config.json (read by model info; 0.5B written with a small hidden size,
// the others only sized).
func TestModelInitPresetShapes(t *testing.T) {
	for name, want := range map[string]modelgen.Config{
		"qwen2.5-0.5b": {Layers: 24, Hidden: 896, Heads: 14, KVHeads: 2, FFN: 4864, Vocab: 151936, Ctx: 32768, TiedEmbeddings: true},
		"qwen2.5-1.5b": {Layers: 28, Hidden: 1536, Heads: 12, KVHeads: 2, FFN: 8960, Vocab: 151936, Ctx: 32768, TiedEmbeddings: true},
		"qwen2.5-3b":   {Layers: 36, Hidden: 2048, Heads: 16, KVHeads: 2, FFN: 11008, Vocab: 151936, Ctx: 32768, TiedEmbeddings: true},
		"qwen2.5-7b":   {Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4, FFN: 18944, Vocab: 152064, Ctx: 32768, TiedEmbeddings: false},
	} {
		p, ok := modelgen.LookupPreset(name)
		c := p.Config
		if !ok || c.Layers != want.Layers || c.Hidden != want.Hidden || c.Heads != want.Heads || c.KVHeads != want.KVHeads || c.FFN != want.FFN ||
			c.Vocab != want.Vocab || c.Ctx != want.Ctx || c.TiedEmbeddings != want.TiedEmbeddings || c.RopeBase != 1e6 {
			t.Errorf("%s: %+v", name, c)
		}
	}
	// the real parameter counts (Qwen's model cards: 0.49B, 1.54B, 3.09B, 7.61B)
	for name, billions := range map[string]float64{"qwen2.5-0.5b": 0.49, "qwen2.5-1.5b": 1.54, "qwen2.5-3b": 3.09, "qwen2.5-7b": 7.61} {
		p, _ := modelgen.LookupPreset(name)
		if got := float64(p.Config.ParamCount()) / 1e9; got < billions-0.01 || got > billions+0.01 { // the cards round either way
			t.Errorf("%s: %.3fB parameters, the model card says %.2fB", name, got, billions)
		}
	}
	out := filepath.Join(t.TempDir(), "p.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", out, "--preset", "qwen2.5-0.5b", "--hidden", "56", "--ffn", "64", "--vocab", "600"); err != nil {
		t.Fatalf("init: %v\n%s", err, stderr)
	}
	stdout, _, err := runCLI(t, "model", "info", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	var r modelInfoReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	h := r.Hyper
	if h.Layers != 24 || h.Hidden != 56 || h.Heads != 14 || h.KVHeads != 2 || h.FFN != 64 || h.Context != 32768 || h.RopeBase != 1e6 ||
		r.Tokenizer.Tokens != 600 || r.Name != "empo2-random-qwen2.5-0.5b" {
		t.Errorf("preset with overrides: %+v %+v %q", h, r.Tokenizer, r.Name)
	}
	for _, ti := range r.TensorList {
		if ti.Name == "output.weight" {
			t.Error("the 0.5B preset is tied, but output.weight was written")
		}
	}
}

func sameFiles(t *testing.T, a, b string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !bytes.Equal(mustRead(t, filepath.Join(a, n)), mustRead(t, filepath.Join(b, n))) {
			t.Errorf("%s differs from the original", n)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
