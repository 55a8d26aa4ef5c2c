package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/modelgen"
)

// modelDefaults are model init's defaults: modelgen's tiny model with a
// context of modelInitCtx tokens.
var modelDefaults = func() modelgen.Config {
	c := modelgen.DefaultConfig()
	c.Ctx = modelInitCtx
	return c
}()

// modelInitCtx is model init's default context. It must hold the first
// prompt and an action of every textlab task under every preset's default
// training, so that a new user's `model init` then `train --preset P --env
// textlab` runs (TestModelInitFitsPresets): the longest first prompt,
// use-thermometer's, is 559 tokens with the default vocabulary (modelgen's
// own default, 512, is the library tests' smaller model).
const modelInitCtx = 2048

var (
	modelInitOutFlag     = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "GGUF file to write", Required: true}
	modelInitLayersFlag  = &cli.IntFlag{Name: "layers", Usage: "transformer blocks", Value: modelDefaults.Layers}
	modelInitHiddenFlag  = &cli.IntFlag{Name: "hidden", Usage: "embedding width (n_embd)", Value: modelDefaults.Hidden}
	modelInitHeadsFlag   = &cli.IntFlag{Name: "heads", Usage: "attention heads (must divide --hidden)", Value: modelDefaults.Heads}
	modelInitKVHeadsFlag = &cli.IntFlag{Name: "kv-heads", Usage: "key/value heads, GQA (must divide --heads)", Value: modelDefaults.KVHeads}
	modelInitFFNFlag     = &cli.IntFlag{Name: "ffn", Usage: "feed-forward width", Value: modelDefaults.FFN}
	modelInitVocabFlag   = &cli.IntFlag{Name: "vocab", Usage: "vocabulary size: 256 bytes + learned merges + 3 ChatML specials", Value: modelDefaults.Vocab}
	modelInitCtxFlag     = &cli.IntFlag{Name: "ctx", Usage: "training context length (qwen2.context_length)", Value: modelDefaults.Ctx}
	modelInitSeedFlag    = &cli.Int64Flag{Name: "seed", Usage: "weight seed (same flags and seed → byte-identical file)", Value: modelDefaults.Seed}
	modelInitDTypeFlag   = &cli.StringFlag{Name: "dtype", Usage: "f32, or f16 (2-D weights F16, norms and biases F32)", Value: modelDefaults.DType}
	modelInitCorpusFlag  = &cli.StringFlag{Name: "corpus", Usage: "text `FILE` to train the BPE tokenizer on (default: built-in corpus)"}
	modelInitTiedFlag    = &cli.BoolFlag{Name: "tied", Usage: "tie the output projection to the token embeddings (no output.weight)"}
	modelInitStdFlag     = &cli.Float64Flag{Name: "init-std", Usage: "weight std; 0 = 1/sqrt(fan-in) per matrix"}
	modelInitRopeFlag    = &cli.Float64Flag{Name: "rope-base", Usage: "RoPE frequency base", Value: float64(modelDefaults.RopeBase)}
	modelInitNameFlag    = &cli.StringFlag{Name: "name", Usage: "general.name (default empo2-tiny-qwen2, or empo2-tiny-bert)"}
	modelInitMaxSizeFlag = &cli.StringFlag{Name: "max-size", Usage: "refuse to write a file larger than this (bytes, or with a unit: 500MiB, 64GiB, 2GB)", Value: "64GiB"}
	modelInitTokFlag     = &cli.StringFlag{Name: "tokenizer", Usage: "a Hugging Face tokenizer `DIR` (tokenizer.json + tokenizer_config.json) or its tokenizer.json: the model gets that vocabulary, written as llama.cpp's convert_hf_to_gguf.py writes it (byte-level BPE: Qwen2/2.5/3, Llama 3), and keeps the files for export --format hf"}
	modelInitPresetFlag  = &cli.StringFlag{Name: "preset", Usage: "the dimensions of a real model (" + strings.Join(modelgen.PresetNames(), ", ") + "): layers, hidden, heads, KV heads, FFN, vocab, context, RoPE base, tied embeddings; random weights; explicit flags override"}
	modelInitArchFlag    = &cli.StringFlag{Name: "arch", Usage: "qwen2 (causal LM), or bert (encoder-only embedding model, WordPiece vocabulary, mean pooling; --kv-heads, --tied, --init-std and --rope-base do not apply, --vocab and --ctx default to 1024 and 128)", Value: "qwen2"}

	modelInfoJSONFlag     = &cli.BoolFlag{Name: "json", Usage: "print JSON"}
	modelInfoTensorsFlag  = &cli.BoolFlag{Name: "tensors", Usage: "list every tensor (name, type, shape)"}
	modelInfoTemplateFlag = &cli.BoolFlag{Name: "template", Usage: "print the full chat template"}
)

func init() {
	register(&cli.Command{
		Name:  "model",
		Usage: "generate tiny Qwen2 (or BERT) GGUF models and inspect GGUF files",
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "write a random-weight Qwen2 GGUF with a self-trained byte-level BPE tokenizer (or, with --arch bert, a BERT embedding model)",
				Description: "Examples:\n" +
					"   empo2 model init --out tiny.gguf\n" +
					"   empo2 model init --out m100.gguf --layers 12 --hidden 768 --heads 12 --kv-heads 2 --ffn 2048 --vocab 8192 --dtype f16\n" +
					"   empo2 model init --out custom.gguf --corpus my-text.txt --vocab 1024 --tied --seed 7\n" +
					"   empo2 model init --arch bert --out embed.gguf   # a tiny BERT embedding model\n" +
					"   empo2 model init --out qwen-vocab.gguf --tokenizer ../shared/qwen-tokenizer --tied   # Qwen's real vocabulary\n" +
					"   empo2 model init --out q7b.gguf --preset qwen2.5-7b --tokenizer DIR --dtype f16     # Qwen2.5-7B's shape",
				Flags: []cli.Flag{modelInitOutFlag, modelInitLayersFlag, modelInitHiddenFlag, modelInitHeadsFlag, modelInitKVHeadsFlag,
					modelInitFFNFlag, modelInitVocabFlag, modelInitCtxFlag, modelInitSeedFlag, modelInitDTypeFlag, modelInitCorpusFlag,
					modelInitTokFlag, modelInitPresetFlag, modelInitTiedFlag, modelInitStdFlag, modelInitRopeFlag, modelInitNameFlag,
					modelInitArchFlag, modelInitMaxSizeFlag, forceFlag},
				Action: modelInit,
			},
			modelTokenizeCommand,
			{
				Name:      "info",
				Usage:     "describe a GGUF file (any model or adapter): architecture, sizes, tokenizer, chat template",
				ArgsUsage: "FILE",
				Description: "Examples:\n" +
					"   empo2 model info tiny.gguf\n" +
					"   empo2 model info --json qwen2.5-0.5b-instruct-q8_0.gguf\n" +
					"   empo2 model info --tensors adapter.gguf",
				Flags:  []cli.Flag{modelInfoJSONFlag, modelInfoTensorsFlag, modelInfoTemplateFlag},
				Action: modelInfo,
			},
			modelQuantizeCmd,
		},
	})
}

func modelInit(c *cli.Context) error {
	// a preset replaces the defaults; explicit flags override both
	base := modelDefaults
	var preset *modelgen.Preset
	if name := c.String(modelInitPresetFlag.Name); name != "" {
		p, ok := modelgen.LookupPreset(name)
		if !ok {
			return fmt.Errorf("model init: --preset %q: want one of %s", name, strings.Join(modelgen.PresetNames(), ", "))
		}
		preset, base = &p, p.Config
		base.Seed, base.DType = modelDefaults.Seed, modelDefaults.DType
	}
	pick := func(f *cli.IntFlag, v int) int {
		if c.IsSet(f.Name) {
			return c.Int(f.Name)
		}
		return v
	}
	cfg := modelgen.Config{
		Layers: pick(modelInitLayersFlag, base.Layers), Hidden: pick(modelInitHiddenFlag, base.Hidden),
		Heads: pick(modelInitHeadsFlag, base.Heads), KVHeads: pick(modelInitKVHeadsFlag, base.KVHeads),
		FFN: pick(modelInitFFNFlag, base.FFN), Vocab: pick(modelInitVocabFlag, base.Vocab), Ctx: pick(modelInitCtxFlag, base.Ctx),
		Seed: c.Int64(modelInitSeedFlag.Name), DType: c.String(modelInitDTypeFlag.Name),
		TiedEmbeddings: base.TiedEmbeddings, InitStd: float32(c.Float64(modelInitStdFlag.Name)),
		RopeBase: base.RopeBase, Name: c.String(modelInitNameFlag.Name),
	}
	if c.IsSet(modelInitTiedFlag.Name) {
		cfg.TiedEmbeddings = c.Bool(modelInitTiedFlag.Name)
	}
	if c.IsSet(modelInitRopeFlag.Name) {
		cfg.RopeBase = float32(c.Float64(modelInitRopeFlag.Name))
	}
	if preset != nil && cfg.Name == "" {
		cfg.Name = "empo2-random-" + preset.Name
	}
	if preset != nil && c.String(modelInitArchFlag.Name) != "qwen2" {
		return fmt.Errorf("model init: --preset applies to --arch qwen2")
	}
	if c.NArg() > 0 {
		return fmt.Errorf("model init: unexpected argument %q (the output file is --out)", c.Args().First())
	}
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--out", Path: c.String(modelInitOutFlag.Name)}},
		[]safefile.Path{{Flag: "--corpus", Path: c.String(modelInitCorpusFlag.Name)},
			{Flag: "--tokenizer", Path: c.String(modelInitTokFlag.Name), Dir: true, Files: modelgen.HFTokenizerFiles}}); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	if err := checkNew(c, safefile.Path{Flag: "--out", Path: c.String(modelInitOutFlag.Name)}); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	if dir := c.String(modelInitTokFlag.Name); dir != "" {
		if c.IsSet(modelInitCorpusFlag.Name) {
			return fmt.Errorf("model init: --corpus trains a tokenizer, --tokenizer brings one: give one of them")
		}
		if c.String(modelInitArchFlag.Name) != "qwen2" {
			return fmt.Errorf("model init: --tokenizer applies to --arch qwen2")
		}
		tok, err := modelgen.LoadHFTokenizer(dir)
		if err != nil {
			return fmt.Errorf("model init: --tokenizer: %w", err)
		}
		if preset != nil && tok.ConfigTokenIDs == nil {
			tok.ConfigTokenIDs = preset.TokenIDs // the real model's config.json
		}
		cfg.HFTokenizer = tok
		if !c.IsSet(modelInitVocabFlag.Name) && preset == nil {
			cfg.Vocab = 0 // the tokenizer's own size (or its config.json's vocab_size)
		}
	}
	if p := c.String(modelInitCorpusFlag.Name); p != "" {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("model init: --corpus: %w", err)
		}
		if st.Size() > 256<<20 {
			return fmt.Errorf("model init: --corpus %s is %d bytes (max 256 MiB)", p, st.Size())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("model init: --corpus: %w", err)
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return fmt.Errorf("model init: --corpus %s is empty", p)
		}
		cfg.Corpus = string(b)
	}
	switch arch := c.String(modelInitArchFlag.Name); arch {
	case "qwen2":
	case "bert":
		return modelInitBERT(c, cfg)
	default:
		return fmt.Errorf("model init: --arch %q: want qwen2 or bert", arch)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	out := c.String(modelInitOutFlag.Name)
	if err := checkModelSize(c, out, cfg.FileBytes()); err != nil {
		return err
	}
	start := time.Now()
	var bar *progressbar.ProgressBar
	var progress func(done, total int64)
	// a progress bar for big models, on a terminal only (no \r noise in logs)
	if cfg.ParamCount() >= 10_000_000 && term.IsTerminal(int(os.Stderr.Fd())) {
		progress = func(done, total int64) {
			if bar == nil {
				bar = progressbar.NewOptions64(total,
					progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("writing "+out),
					progressbar.OptionShowBytes(true),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish())
			}
			bar.Set64(done)
		}
	}
	err := modelgen.WriteProgress(out, cfg, progress)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	log.Info().Str("out", out).Int64("params", cfg.ParamCount()).Int64("bytes", st.Size()).
		Str("dtype", c.String(modelInitDTypeFlag.Name)).Str("took", logDur(time.Since(start))).Msg("wrote model")
	vocab := cfg.Vocab
	tokenizer := "trained BPE"
	if t := cfg.HFTokenizer; t != nil {
		if vocab == 0 {
			vocab = t.DefaultVocab()
		}
		tokenizer = fmt.Sprintf("Hugging Face BPE (pre %s, %d tokens + %d padding)", t.Pre, len(t.Tokens), vocab-len(t.Tokens))
	}
	tied := ""
	if cfg.TiedEmbeddings {
		tied = ", tied"
	}
	fmt.Fprintf(c.App.Writer, "%s: qwen2, %d layers, hidden %d, %d heads (%d kv), ffn %d, vocab %d, ctx %d%s, %s, %s, %s parameters, %s bytes\n",
		out, cfg.Layers, cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.FFN, vocab, cfg.Ctx, tied, c.String(modelInitDTypeFlag.Name),
		tokenizer, groupDigits(cfg.ParamCount()), groupDigits(st.Size()))
	return nil
}

// checkModelSize announces the size of the file about to be written and
// refuses one above --max-size, before anything is written.
func checkModelSize(c *cli.Context, out string, est int64) error {
	limit, err := parseByteSize(c.String(modelInitMaxSizeFlag.Name))
	if err != nil {
		return fmt.Errorf("model init: --max-size: %w", err)
	}
	if est > limit {
		return fmt.Errorf("model init: the model would be about %s bytes (%s), above --max-size %s: give smaller dimensions or raise --max-size",
			groupDigits(est), humanBytes(est), c.String(modelInitMaxSizeFlag.Name))
	}
	log.Info().Str("out", out).Str("size", humanBytes(est)).Int64("bytes", est).Msg("writing model (estimated size)")
	return nil
}

// parseByteSize reads "123", "500MiB", "64GiB", "2GB", "1.5TiB".
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suf string
		mul float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mul := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suf)) {
			t, mul = strings.TrimSpace(t[:len(t)-len(u.suf)]), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || v*mul > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q: want a positive size such as 64GiB", s)
	}
	return int64(v * mul), nil
}

// humanBytes is n in binary units, e.g. "1.6 GiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// modelInitBERT writes a BERT embedding model with the Qwen2 flags that
// apply to it; flags that do not apply are refused when set.
func modelInitBERT(c *cli.Context, q modelgen.Config) error {
	for _, f := range []string{modelInitKVHeadsFlag.Name, modelInitTiedFlag.Name, modelInitStdFlag.Name, modelInitRopeFlag.Name} {
		if c.IsSet(f) {
			return fmt.Errorf("model init: --%s does not apply to --arch bert", f)
		}
	}
	cfg := modelgen.DefaultBERTConfig()
	cfg.Layers, cfg.Hidden, cfg.Heads, cfg.FFN = q.Layers, q.Hidden, q.Heads, q.FFN
	if c.IsSet(modelInitVocabFlag.Name) {
		cfg.Vocab = q.Vocab
	}
	if c.IsSet(modelInitCtxFlag.Name) {
		cfg.Ctx = q.Ctx
	}
	cfg.Seed, cfg.DType, cfg.Corpus, cfg.Name = q.Seed, q.DType, q.Corpus, q.Name
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	out := c.String(modelInitOutFlag.Name)
	// A BERT model is the same matrices without GQA: the Qwen2 estimate
	// with kv-heads = heads and untied output bounds it from above.
	if err := checkModelSize(c, out, modelgen.Config{Layers: cfg.Layers, Hidden: cfg.Hidden, Heads: cfg.Heads, KVHeads: cfg.Heads,
		FFN: cfg.FFN, Vocab: cfg.Vocab, Ctx: cfg.Ctx, DType: cfg.DType}.FileBytes()); err != nil {
		return err
	}
	if err := modelgen.WriteBERT(out, cfg); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "%s: bert, %d layers, hidden %d, %d heads, ffn %d, vocab %d, ctx %d, %s, %s parameters, %s bytes\n",
		out, cfg.Layers, cfg.Hidden, cfg.Heads, cfg.FFN, cfg.Vocab, cfg.Ctx, cfg.DType, groupDigits(cfg.ParamCount()), groupDigits(st.Size()))
	return nil
}

// modelInfoReport is what `model info` prints (and --json encodes).
type modelInfoReport struct {
	File         string            `json:"file"`
	SizeBytes    int64             `json:"size_bytes"`
	GGUFVersion  uint32            `json:"gguf_version"`
	Alignment    uint64            `json:"alignment"`
	MetadataKeys int               `json:"metadata_keys"`
	Tensors      int               `json:"tensors"`
	Architecture string            `json:"architecture,omitempty"`
	Type         string            `json:"type,omitempty"` // general.type: model, adapter
	Name         string            `json:"name,omitempty"`
	FileType     string            `json:"file_type,omitempty"`
	Parameters   uint64            `json:"parameters"`
	TensorTypes  map[string]int    `json:"tensor_types"`
	Hyper        *modelHyper       `json:"hyperparameters,omitempty"`
	Adapter      map[string]any    `json:"adapter,omitempty"`
	Tokenizer    *modelTokenizer   `json:"tokenizer,omitempty"`
	ChatTemplate string            `json:"chat_template,omitempty"`
	TensorList   []modelTensorLine `json:"tensor_list,omitempty"`
}

type modelHyper struct {
	Layers    uint64  `json:"layers,omitempty"`
	Hidden    uint64  `json:"hidden,omitempty"`
	FFN       uint64  `json:"ffn,omitempty"`
	Heads     uint64  `json:"heads,omitempty"`
	KVHeads   uint64  `json:"kv_heads,omitempty"`
	HeadDim   uint64  `json:"head_dim,omitempty"`
	Context   uint64  `json:"context,omitempty"`
	RopeBase  float32 `json:"rope_base,omitempty"`
	RMSNormEp float32 `json:"rms_norm_eps,omitempty"`
	NormEps   float32 `json:"layer_norm_eps,omitempty"` // LayerNorm models (bert)
	Causal    *bool   `json:"causal,omitempty"`         // <arch>.attention.causal, when present
	Pooling   string  `json:"pooling,omitempty"`        // <arch>.pooling_type, when present
}

type modelTokenizer struct {
	Model    string         `json:"model"`
	Pre      string         `json:"pre,omitempty"`
	Tokens   int            `json:"tokens"`
	Merges   int            `json:"merges"`
	Specials map[string]int `json:"special_ids,omitempty"` // eos, bos, padding, ...
	Control  []string       `json:"control_tokens,omitempty"`
	AddBOS   *bool          `json:"add_bos,omitempty"`
}

type modelTensorLine struct {
	Name  string   `json:"name"`
	Type  string   `json:"type"`
	Shape []uint64 `json:"shape"`
}

func modelInfo(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("model info: want exactly one FILE argument, got %d", c.NArg())
	}
	path := c.Args().First()
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("model info: %w", err)
	}
	defer f.Close()
	r := buildModelInfo(f, path, c.Bool(modelInfoTensorsFlag.Name))
	if c.Bool(modelInfoJSONFlag.Name) {
		return printJSON(c.App.Writer, r)
	}
	printModelInfo(c.App.Writer, r, c.Bool(modelInfoTemplateFlag.Name))
	return nil
}

func buildModelInfo(f *gguf.File, path string, tensors bool) *modelInfoReport {
	r := &modelInfoReport{
		File: path, SizeBytes: f.Size, GGUFVersion: f.Version, Alignment: f.Alignment,
		MetadataKeys: len(f.Keys()), Tensors: len(f.Tensors), TensorTypes: map[string]int{},
	}
	r.Architecture, _ = f.String("general.architecture")
	r.Type, _ = f.String("general.type")
	r.Name, _ = f.String("general.name")
	if ft, ok := f.Uint32("general.file_type"); ok {
		r.FileType = gguf.FileTypeName(ft)
	}
	for _, ti := range f.Tensors {
		r.Parameters += ti.NumElements()
		r.TensorTypes[ti.Type.String()]++
		if tensors {
			r.TensorList = append(r.TensorList, modelTensorLine{ti.Name, ti.Type.String(), ti.Shape})
		}
	}
	if a := r.Architecture; a != "" {
		u := func(k string) uint64 { v, _ := f.Uint64(a + "." + k); return v }
		h := &modelHyper{
			Layers: u("block_count"), Hidden: u("embedding_length"), FFN: u("feed_forward_length"),
			Heads: u("attention.head_count"), KVHeads: u("attention.head_count_kv"), Context: u("context_length"),
		}
		if h.KVHeads == 0 {
			h.KVHeads = h.Heads // llama.cpp's default when head_count_kv is absent
		}
		if h.Heads > 0 {
			h.HeadDim = h.Hidden / h.Heads
		}
		h.NormEps, _ = f.Float32(a + ".attention.layer_norm_epsilon")
		if b, ok := f.Bool(a + ".attention.causal"); ok {
			h.Causal = &b
		}
		if pt, ok := f.Uint64(a + ".pooling_type"); ok {
			h.Pooling = map[uint64]string{0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}[pt]
			if h.Pooling == "" {
				h.Pooling = fmt.Sprint(pt)
			}
		}
		h.RopeBase, _ = f.Float32(a + ".rope.freq_base")
		h.RMSNormEp, _ = f.Float32(a + ".attention.layer_norm_rms_epsilon")
		if *h != (modelHyper{}) {
			r.Hyper = h
		}
	}
	for _, k := range f.Keys() {
		if strings.HasPrefix(k, "adapter.") {
			if r.Adapter == nil {
				r.Adapter = map[string]any{}
			}
			v, _ := f.Get(k)
			r.Adapter[strings.TrimPrefix(k, "adapter.")] = v
		}
	}
	if m, ok := f.String("tokenizer.ggml.model"); ok {
		t := &modelTokenizer{Model: m, Specials: map[string]int{}}
		t.Pre, _ = f.String("tokenizer.ggml.pre")
		t.Tokens, _ = f.ArrayLen("tokenizer.ggml.tokens")
		t.Merges, _ = f.ArrayLen("tokenizer.ggml.merges")
		for _, k := range f.Keys() {
			if strings.HasPrefix(k, "tokenizer.ggml.") && strings.HasSuffix(k, "_token_id") {
				if id, ok := f.Int64(k); ok {
					t.Specials[strings.TrimSuffix(strings.TrimPrefix(k, "tokenizer.ggml."), "_token_id")] = int(id)
				}
			}
		}
		if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); ok {
			t.AddBOS = &b
		}
		toks, _ := f.Strings("tokenizer.ggml.tokens")
		if tt, ok := f.Get("tokenizer.ggml.token_type"); ok {
			if types, ok := tt.([]int32); ok && len(types) == len(toks) {
				for i, ty := range types {
					if ty == gguf.TokenTypeControl {
						t.Control = append(t.Control, toks[i])
						if len(t.Control) == 64 {
							break
						}
					}
				}
			}
		}
		r.Tokenizer = t
	}
	r.ChatTemplate, _ = f.String("tokenizer.chat_template")
	return r
}

func printModelInfo(w io.Writer, r *modelInfoReport, fullTemplate bool) {
	p := func(label, format string, a ...any) {
		fmt.Fprintf(w, "%-15s "+format+"\n", append([]any{label + ":"}, a...)...)
	}
	p("file", "%s (%s bytes)", r.File, groupDigits(r.SizeBytes))
	p("gguf", "v%d, %d metadata keys, %d tensors, alignment %d", r.GGUFVersion, r.MetadataKeys, r.Tensors, r.Alignment)
	if r.Architecture != "" {
		p("architecture", "%s", r.Architecture)
	}
	if r.Type != "" {
		p("type", "%s", r.Type)
	}
	if r.Name != "" {
		p("name", "%s", r.Name)
	}
	if r.FileType != "" {
		p("file type", "%s", r.FileType)
	}
	var types []string
	for t, n := range r.TensorTypes {
		types = append(types, fmt.Sprintf("%s×%d", t, n))
	}
	sort.Strings(types)
	p("parameters", "%s (%s)", groupDigits(int64(r.Parameters)), strings.Join(types, ", "))
	if h := r.Hyper; h != nil {
		p("layers", "%d", h.Layers)
		p("hidden", "%d (ffn %d)", h.Hidden, h.FFN)
		p("heads", "%d (kv %d, head dim %d)", h.Heads, h.KVHeads, h.HeadDim)
		p("context", "%d", h.Context)
		if h.RopeBase != 0 {
			p("rope base", "%g", h.RopeBase)
		}
		if h.RMSNormEp != 0 {
			p("rms norm eps", "%g", h.RMSNormEp)
		}
		if h.NormEps != 0 {
			p("norm eps", "%g", h.NormEps)
		}
		if h.Causal != nil {
			p("causal", "%v", *h.Causal)
		}
		if h.Pooling != "" {
			p("pooling", "%s", h.Pooling)
		}
	}
	if len(r.Adapter) > 0 {
		var kv []string
		for k, v := range r.Adapter {
			kv = append(kv, fmt.Sprintf("%s=%v", k, v))
		}
		sort.Strings(kv)
		p("adapter", "%s", strings.Join(kv, ", "))
	}
	if t := r.Tokenizer; t != nil {
		pre := ""
		if t.Pre != "" {
			pre = ", pre " + t.Pre
		}
		p("tokenizer", "%s%s, %d tokens, %d merges", t.Model, pre, t.Tokens, t.Merges)
		if len(t.Specials) > 0 {
			var sp []string
			for k, v := range t.Specials {
				sp = append(sp, fmt.Sprintf("%s=%d", k, v))
			}
			sort.Strings(sp)
			p("special ids", "%s", strings.Join(sp, ", "))
		}
		if len(t.Control) > 0 {
			p("control", "%s", strings.Join(t.Control, " "))
		}
		if t.AddBOS != nil {
			p("add bos", "%v", *t.AddBOS)
		}
	}
	if r.ChatTemplate != "" {
		kind := "custom"
		switch {
		case strings.Contains(r.ChatTemplate, "<|im_start|>"):
			kind = "ChatML"
		case strings.Contains(r.ChatTemplate, "[INST]"):
			kind = "Mistral/Llama-2"
		case strings.Contains(r.ChatTemplate, "<|start_header_id|>"):
			kind = "Llama-3"
		case strings.Contains(r.ChatTemplate, "<start_of_turn>"):
			kind = "Gemma"
		}
		p("chat template", "%s (%d bytes, %d lines)", kind, len(r.ChatTemplate), strings.Count(r.ChatTemplate, "\n")+1)
		if fullTemplate {
			fmt.Fprintln(w, r.ChatTemplate)
		}
	} else {
		p("chat template", "none")
	}
	for _, t := range r.TensorList {
		fmt.Fprintf(w, "  %-40s %-6s %v\n", t.Name, t.Type, t.Shape)
	}
}

// groupDigits formats n with thousands separators: 1234567 → "1,234,567".
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
