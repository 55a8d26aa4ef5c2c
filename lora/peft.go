package lora

// Hugging Face interop, part 2: LoRA adapters in PEFT's format
// (adapter_model.safetensors + adapter_config.json), both ways.
//
// Names. PEFT saves the LoRA of module M of the base model (for Qwen2 e.g.
// "model.layers.3.self_attn.q_proj", see HFTensorName) as
//
//	base_model.model.<M>.lora_A.weight   shape [r, in]
//	base_model.model.<M>.lora_B.weight   shape [out, r]
//
// and computes y = W·x + s·B·(A·x) with s = lora_alpha / r (Hu et al. 2021,
// eq. 3 with PEFT's scaling), or lora_alpha / √r with use_rslora
// (Kalajdzievski 2023). llama.cpp's lora_a (ne [in, r]) and lora_b
// (ne [r, out]) hold the same matrices in the same byte order, and its scale
// is adapter.lora.alpha / r, so a conversion copies the data unchanged and
// maps alpha. Two differences are handled: llama.cpp reads alpha = 0 as
// scale 1 (PEFT: scale 0), and llama.cpp has one alpha for the whole file
// while PEFT may give modules their own (alpha_pattern, rank_pattern with
// rsLoRA); such a module's scale is folded into its B on import.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/safetensors"
)

// File names and name parts of a PEFT adapter folder.
const (
	PEFTWeightsFile = "adapter_model.safetensors"
	PEFTConfigFile  = "adapter_config.json"
	peftPrefix      = "base_model.model."
	peftSuffixA     = ".lora_A.weight"
	peftSuffixB     = ".lora_B.weight"
	// peftMetaPrefix prefixes the adapter GGUF's own metadata in the
	// safetensors "__metadata__" (e.g. "gguf.general.name"), so that a round
	// trip GGUF → PEFT → GGUF restores it.
	peftMetaPrefix = "gguf."
)

// PEFTFiles are the files ExportPEFT writes into its directory.
var PEFTFiles = []string{PEFTConfigFile, PEFTWeightsFile}

// PEFTConfig is adapter_config.json as PEFT's LoraConfig writes it (keys in
// alphabetical order, as PEFT's save_pretrained sorts them).
type PEFTConfig struct {
	AlphaPattern        map[string]json.Number `json:"alpha_pattern"`
	AutoMapping         any                    `json:"auto_mapping"`
	BaseModelNameOrPath string                 `json:"base_model_name_or_path"`
	Bias                string                 `json:"bias"`
	FanInFanOut         bool                   `json:"fan_in_fan_out"`
	InferenceMode       bool                   `json:"inference_mode"`
	InitLoraWeights     any                    `json:"init_lora_weights"`
	LayersPattern       any                    `json:"layers_pattern"`
	LayersToTransform   any                    `json:"layers_to_transform"`
	LoraAlpha           json.Number            `json:"lora_alpha"`
	LoraDropout         float64                `json:"lora_dropout"`
	ModulesToSave       []string               `json:"modules_to_save"`
	PEFTType            string                 `json:"peft_type"`
	R                   int                    `json:"r"`
	RankPattern         map[string]int         `json:"rank_pattern"`
	Revision            any                    `json:"revision"`
	TargetModules       any                    `json:"target_modules"` // []string, or a regex string when read
	TaskType            string                 `json:"task_type"`
	UseDoRA             bool                   `json:"use_dora"`
	UseRSLoRA           bool                   `json:"use_rslora"`
}

// PEFTOptions configures ExportPEFT.
type PEFTOptions struct {
	DType     safetensors.DType // F32 (default), F16 or BF16
	BaseModel string            // base_model_name_or_path; "" = the base GGUF's general.name
}

// peftModule returns the transformers module a base tensor belongs to
// ("blk.3.attn_q.weight" → "model.layers.3.self_attn.q_proj").
func peftModule(base string) (string, error) {
	hf, ok := HFTensorName(base)
	if !ok || !strings.HasSuffix(hf, ".weight") || strings.HasSuffix(base, "_norm.weight") || base == "token_embd.weight" {
		return "", fmt.Errorf("%w: no PEFT LoRA module for %s", ErrUnsupported, base)
	}
	return strings.TrimSuffix(hf, ".weight"), nil
}

func leaf(module string) string { return module[strings.LastIndexByte(module, '.')+1:] }

// ExportPEFT writes the adapter as a PEFT LoRA folder in dir (PEFTFiles,
// through a staging folder as ExportHF writes its folder):
// adapter_model.safetensors (lora_A [r, in], lora_B [out, r] per
// adapted module, values unchanged) and adapter_config.json (r, lora_alpha,
// target_modules, …) for transformers' Qwen2ForCausalLM of the base model.
// The scale stays alpha/r; an adapter with alpha 0 (llama.cpp: scale 1) is
// written with lora_alpha = r. Ranks that differ from the most common one go
// to rank_pattern. target_modules lists the projection names (q_proj, …)
// adapted in every block, and full module names otherwise.
func ExportPEFT(a *Adapter, base *gguf.File, dir string, opt PEFTOptions) error {
	if err := Validate(a, base); err != nil {
		return err
	}
	if a.Arch != "qwen2" {
		return fmt.Errorf("%w: PEFT export supports qwen2 adapters (llama.cpp permutes the q/k rows of %q models)", ErrUnsupported, a.Arch)
	}
	dtype := opt.DType
	if dtype == "" {
		dtype = safetensors.F32
	}
	if dtype != safetensors.F32 && dtype != safetensors.F16 && dtype != safetensors.BF16 {
		return fmt.Errorf("%w: dtype %q (want F32, F16 or BF16)", ErrConfig, dtype)
	}
	layers, _ := base.Uint64(a.Arch + ".block_count")
	a.Sort()
	// r = the most common rank (the smallest on a tie).
	count := map[int]int{}
	for _, p := range a.Pairs {
		count[p.Rank]++
	}
	r := 0
	for k, n := range count {
		if r == 0 || n > count[r] || (n == count[r] && k < r) {
			r = k
		}
	}
	cfg := PEFTConfig{
		AlphaPattern: map[string]json.Number{}, BaseModelNameOrPath: opt.BaseModel, Bias: "none",
		InferenceMode: true, InitLoraWeights: true, PEFTType: "LORA", R: r,
		RankPattern: map[string]int{}, TaskType: "CAUSAL_LM",
	}
	if cfg.BaseModelNameOrPath == "" {
		cfg.BaseModelNameOrPath, _ = base.String("general.name")
	}
	alpha := a.Alpha
	if alpha == 0 {
		alpha = float32(r) // llama.cpp: alpha 0 means scale 1
	}
	cfg.LoraAlpha = jsonF32(alpha)
	w := safetensors.NewWriter()
	w.Metadata = map[string]string{"format": "pt"}
	for k, v := range a.Meta {
		if !reservedKey(k) {
			w.Metadata[peftMetaPrefix+k] = v
		}
	}
	w.Metadata[peftMetaPrefix+KeyArchitecture] = a.Arch
	w.Metadata[peftMetaPrefix+KeyAlpha] = strconv.FormatFloat(float64(a.Alpha), 'g', -1, 32)
	perLeaf := map[string]map[int]bool{}
	var modules []string
	for _, p := range a.Pairs {
		m, err := peftModule(p.Base)
		if err != nil {
			return err
		}
		modules = append(modules, m)
		if p.Rank != r {
			cfg.RankPattern[m] = p.Rank
			if a.Alpha == 0 {
				cfg.AlphaPattern[m] = jsonF32(float32(p.Rank)) // keep scale 1
			}
		}
		if l, _, ok := ParseBase(p.Base); ok {
			if perLeaf[leaf(m)] == nil {
				perLeaf[leaf(m)] = map[int]bool{}
			}
			perLeaf[leaf(m)][l] = true
		}
		if err := w.AddF32(peftPrefix+m+peftSuffixA, dtype, []int64{int64(p.Rank), int64(p.In)}, p.A); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		if err := w.AddF32(peftPrefix+m+peftSuffixB, dtype, []int64{int64(p.Out), int64(p.Rank)}, p.B); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
	}
	// target_modules: a projection adapted in every block is named by its
	// leaf (PEFT matches names ending in ".q_proj"); the others in full.
	targets := map[string]bool{}
	for _, m := range modules {
		lf := leaf(m)
		if layers > 0 && len(perLeaf[lf]) == int(layers) {
			targets[lf] = true
		} else {
			targets[m] = true
		}
	}
	tm := make([]string, 0, len(targets))
	for t := range targets {
		tm = append(tm, t)
	}
	sort.Strings(tm)
	cfg.TargetModules = tm
	out, err := safefile.CreateDir(dir)
	if err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	defer out.Abort()
	if err := writeJSON(filepath.Join(out.Path(), PEFTConfigFile), cfg); err != nil {
		return err
	}
	if err := w.WriteFile(filepath.Join(out.Path(), PEFTWeightsFile)); err != nil {
		return fmt.Errorf("lora: writing %s: %w", filepath.Join(dir, PEFTWeightsFile), err)
	}
	if err := out.Commit(); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// peftPatternKey finds the rank_pattern/alpha_pattern key that applies to a
// module, as PEFT's get_pattern_key does: a key matches a module name that
// equals it or ends in "."+key, read as a regular expression.
func peftPatternKey(keys []string, module string) (string, bool) {
	for _, k := range keys {
		if k == module || strings.HasSuffix(module, "."+k) {
			return k, true
		}
	}
	for _, k := range keys {
		re, err := regexp.Compile(`^(.*\.)?(` + k + `)$`)
		if err == nil && re.MatchString(module) {
			return k, true
		}
	}
	return "", false
}

// readPEFTConfig reads adapter_config.json and refuses what a llama.cpp
// LoRA cannot express.
func readPEFTConfig(path string) (*PEFTConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	cfg := &PEFTConfig{R: 8, LoraAlpha: "8", Bias: "none"} // PEFT's LoraConfig defaults
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	switch {
	case cfg.PEFTType != "LORA":
		return nil, fmt.Errorf("%w: %s: peft_type %q (only LORA converts)", ErrUnsupported, path, cfg.PEFTType)
	case cfg.UseDoRA:
		return nil, fmt.Errorf("%w: %s: use_dora (DoRA's magnitude vector has no llama.cpp LoRA form)", ErrUnsupported, path)
	case cfg.FanInFanOut:
		return nil, fmt.Errorf("%w: %s: fan_in_fan_out (Conv1D weights; Qwen2 uses nn.Linear)", ErrUnsupported, path)
	case cfg.Bias != "" && cfg.Bias != "none":
		return nil, fmt.Errorf("%w: %s: bias %q (trained biases have no llama.cpp LoRA form)", ErrUnsupported, path, cfg.Bias)
	case len(cfg.ModulesToSave) > 0:
		return nil, fmt.Errorf("%w: %s: modules_to_save %v (full module copies are not a LoRA)", ErrUnsupported, path, cfg.ModulesToSave)
	}
	return cfg, nil
}

// peftAlpha parses a lora_alpha / alpha_pattern value.
func peftAlpha(n json.Number, what string) (float64, error) {
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > math.MaxFloat32 {
		return 0, fmt.Errorf("%w: %s = %q", ErrInvalid, what, n)
	}
	return f, nil
}

// ImportPEFT reads a PEFT LoRA (a folder holding adapter_model.safetensors
// and adapter_config.json, or the path of the safetensors file with the
// config beside it) as an adapter for the base model, validated against it.
// A module whose PEFT scale (lora_alpha/r, alpha_pattern, rsLoRA) differs
// from what the file's single alpha gives it has that factor multiplied into
// its B; every such change is described in the returned notes. A file that
// ExportPEFT wrote converts back bit for bit, metadata included.
func ImportPEFT(path string, base *gguf.File) (*Adapter, []string, error) {
	dir, weights := path, filepath.Join(path, PEFTWeightsFile)
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir, weights = filepath.Dir(path), path
	} else if err != nil {
		return nil, nil, fmt.Errorf("lora: %w", err)
	}
	if _, err := os.Stat(weights); errors.Is(err, os.ErrNotExist) {
		if _, err2 := os.Stat(filepath.Join(dir, "adapter_model.bin")); err2 == nil {
			return nil, nil, fmt.Errorf("%w: %s holds adapter_model.bin (a pickle); save the adapter with safe_serialization=True", ErrUnsupported, dir)
		}
		return nil, nil, fmt.Errorf("lora: no %s in %s: %w", PEFTWeightsFile, dir, err)
	}
	cfg, err := readPEFTConfig(filepath.Join(dir, PEFTConfigFile))
	if err != nil {
		return nil, nil, err
	}
	alpha0, err := peftAlpha(cfg.LoraAlpha, "lora_alpha")
	if err != nil {
		return nil, nil, err
	}
	f, err := safetensors.Open(weights)
	if err != nil {
		return nil, nil, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	arch, _ := base.String(KeyArchitecture)
	a := &Adapter{Arch: arch, Meta: map[string]string{}}
	for k, v := range f.Metadata {
		if g, ok := strings.CutPrefix(k, peftMetaPrefix); ok && !reservedKey(g) {
			a.Meta[g] = v
		}
	}
	var pairs halves[safetensors.Tensor]
	for i := range f.Tensors {
		t := &f.Tensors[i]
		name := strings.TrimPrefix(t.Name, peftPrefix)
		name = strings.Replace(name, ".lora_A.default.weight", peftSuffixA, 1) // saved without get_peft_model_state_dict
		name = strings.Replace(name, ".lora_B.default.weight", peftSuffixB, 1)
		var m string
		isB := false
		switch {
		case strings.HasSuffix(name, peftSuffixA):
			m = strings.TrimSuffix(name, peftSuffixA)
		case strings.HasSuffix(name, peftSuffixB):
			m, isB = strings.TrimSuffix(name, peftSuffixB), true
		case strings.Contains(name, "lora_magnitude_vector"):
			return nil, nil, fmt.Errorf("%w: %s is a DoRA magnitude vector", ErrUnsupported, t.Name)
		case strings.Contains(name, "lora_embedding_"):
			return nil, nil, fmt.Errorf("%w: %s: LoRA on embeddings", ErrUnsupported, t.Name)
		default:
			return nil, nil, fmt.Errorf("%w: tensor %s is not a lora_A/lora_B weight", ErrNotAdapter, t.Name)
		}
		pairs.add(m, isB, t)
	}
	if pairs.len() == 0 {
		return nil, nil, fmt.Errorf("%w: %s has no LoRA tensors", ErrInvalid, weights)
	}
	// The scale PEFT gives each module, then one alpha for the file.
	rankKeys, alphaKeys := sortedKeys(cfg.RankPattern), sortedKeys(cfg.AlphaPattern)
	type conv struct {
		p     *Pair
		scale float64
	}
	var convs []conv
	if err := pairs.each(func(m string, ha, hb *safetensors.Tensor) error {
		g, ok := GGUFTensorName(m + ".weight")
		if !ok {
			return fmt.Errorf("%w: module %s has no llama.cpp Qwen2 tensor", ErrUnsupported, m)
		}
		if len(ha.Shape) != 2 || len(hb.Shape) != 2 || ha.Shape[0] != hb.Shape[1] {
			return fmt.Errorf("%w: %s: lora_A %v and lora_B %v (want [r, in] and [out, r])", ErrInvalid, m, ha.Shape, hb.Shape)
		}
		const maxDim = 1 << 24
		r, in, out := ha.Shape[0], ha.Shape[1], hb.Shape[0]
		if r <= 0 || in <= 0 || out <= 0 || r > maxDim || in > maxDim || out > maxDim {
			return fmt.Errorf("%w: %s: dimensions in=%d out=%d r=%d", ErrInvalid, m, in, out, r)
		}
		if k, ok := peftPatternKey(rankKeys, m); ok && cfg.RankPattern[k] != int(r) {
			return fmt.Errorf("%w: %s: rank_pattern %q says r=%d, the tensors have r=%d", ErrInvalid, m, k, cfg.RankPattern[k], r)
		}
		al := alpha0
		if k, ok := peftPatternKey(alphaKeys, m); ok {
			var err error
			if al, err = peftAlpha(cfg.AlphaPattern[k], "alpha_pattern["+k+"]"); err != nil {
				return err
			}
		}
		s := al / float64(r)
		if cfg.UseRSLoRA {
			s = al / math.Sqrt(float64(r))
		}
		p := &Pair{Base: g, In: int(in), Out: int(out), Rank: int(r)}
		var err error
		if p.A, err = f.ReadF32(ha.Name); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		if p.B, err = f.ReadF32(hb.Name); err != nil {
			return fmt.Errorf("lora: %w", err)
		}
		convs = append(convs, conv{p, s})
		return nil
	}); err != nil {
		return nil, nil, err
	}
	// alpha: the one ExportPEFT recorded when it gives every module its
	// PEFT scale (restores alpha = 0 exactly), else r·s of the first module.
	// Scales equal to float32 rounding (1e-6 relative) count as equal: the
	// JSON holds alpha in decimal, llama.cpp computes alpha/r in float32.
	same := func(x, y float64) bool { return math.Abs(x-y) <= 1e-6*math.Abs(y) }
	fits := func(alpha float32) bool {
		for _, c := range convs {
			if !same(float64((&Adapter{Alpha: alpha}).Scale(c.p.Rank)), c.scale) {
				return false
			}
		}
		return true
	}
	alpha := float32(convs[0].scale * float64(convs[0].p.Rank))
	if v, ok := f.Metadata[peftMetaPrefix+KeyAlpha]; ok {
		if x, err := strconv.ParseFloat(v, 32); err == nil && fits(float32(x)) {
			alpha = float32(x)
		}
	}
	a.Alpha = alpha
	var notes []string
	for _, c := range convs {
		got := float64(a.Scale(c.p.Rank))
		if !same(got, c.scale) {
			f := c.scale / got
			for i := range c.p.B {
				c.p.B[i] = float32(float64(c.p.B[i]) * f)
			}
			notes = append(notes, fmt.Sprintf("%s: PEFT scale %g ≠ alpha/r = %g; lora_b multiplied by %g", c.p.Base, c.scale, got, f))
		}
		a.Pairs = append(a.Pairs, c.p)
	}
	a.Sort()
	if err := Validate(a, base); err != nil {
		return nil, nil, err
	}
	return a, notes, nil
}
