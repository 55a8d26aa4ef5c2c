package gpucheck

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
)

// The report gathers what scripts/gpu-check.sh leaves in its work folder:
//
//	meta.json            the machine, the bundle, the time limit (written by the script)
//	phases/NN-name.json  one record per phase, rewritten as the phase runs (PhaseRecord)
//	<result files>       the documents each phase names (this package's
//	                     kinds, the Python script's, the script's own)
//
// into one JSON document and one Markdown page. It is run after every phase,
// so that a run cut short leaves a report of what it finished.

// Report file names in the output folder.
const (
	ReportJSON = "gpu-report.json"
	ReportMD   = "gpu-report.md"
)

// Phase statuses written by the script.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"      // ran, and a check failed or a command exited non-zero
	StatusSkipped     = "skipped"     // not started: its tools are absent, or it would not fit the time left
	StatusTimeout     = "timeout"     // stopped at its own time budget
	StatusRunning     = "running"     // started; the run was cut short before it ended
	StatusInterrupted = "interrupted" // stopped by TERM/INT
)

// PhaseRecord is phases/NN-name.json.
type PhaseRecord struct {
	Name    string   `json:"name"`
	Status  string   `json:"status"`
	Seconds float64  `json:"seconds"`
	Need    float64  `json:"need_s"`   // time the phase needs to be started
	Budget  float64  `json:"budget_s"` // its hard time limit
	Reason  string   `json:"reason,omitempty"`
	Results []string `json:"results,omitempty"` // result files, relative to the work folder
	Log     string   `json:"log,omitempty"`     // its log, relative to the work folder
}

// ReportPhase is a phase in the report: its record and its results.
type ReportPhase struct {
	PhaseRecord
	Docs    map[string]json.RawMessage `json:"docs,omitempty"`
	LogTail []string                   `json:"log_tail,omitempty"` // the log's last lines when the phase did not end ok
}

// ReportDoc is gpu-report.json.
type ReportDoc struct {
	Meta   json.RawMessage `json:"meta,omitempty"`
	Phases []ReportPhase   `json:"phases"`
	// Pass: every phase that ran ended ok (skipped phases do not count).
	Pass bool `json:"pass"`
}

const logTailLines = 25

// WriteReport reads the work folder and writes gpu-report.json and
// gpu-report.md into out.
func WriteReport(work, out string) (*ReportDoc, error) {
	doc := &ReportDoc{Pass: true}
	if b, err := os.ReadFile(filepath.Join(work, "meta.json")); err == nil && json.Valid(b) {
		doc.Meta = b
	}
	files, err := filepath.Glob(filepath.Join(work, "phases", "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		var rec PhaseRecord
		if err := ReadJSON(f, &rec); err != nil {
			rec = PhaseRecord{Name: filepath.Base(f), Status: StatusFailed, Reason: "unreadable phase record: " + err.Error()}
		}
		p := ReportPhase{PhaseRecord: rec, Docs: map[string]json.RawMessage{}}
		for _, r := range rec.Results {
			b, err := os.ReadFile(filepath.Join(work, r))
			switch {
			case err != nil:
				continue // not written (the phase failed or was cut short first)
			case strings.HasSuffix(r, ".jsonl"):
				if lines := jsonLines(b); lines != nil {
					p.Docs[r] = lines
				}
			case json.Valid(b):
				p.Docs[r] = b
			}
		}
		if rec.Status != StatusOK && rec.Status != StatusSkipped && rec.Log != "" {
			p.LogTail = tail(filepath.Join(work, rec.Log), logTailLines)
		}
		if rec.Status != StatusOK && rec.Status != StatusSkipped {
			doc.Pass = false
		}
		doc.Phases = append(doc.Phases, p)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	if err := WriteJSON(filepath.Join(out, ReportJSON), doc); err != nil {
		return nil, err
	}
	var md bytes.Buffer
	renderMarkdown(&md, doc)
	return doc, safefile.WriteFile(filepath.Join(out, ReportMD), md.Bytes(), 0o644)
}

// jsonLines turns a JSON-lines file (metrics.jsonl) into a JSON array; nil
// when a line is not JSON.
func jsonLines(b []byte) json.RawMessage {
	var items []json.RawMessage
	for _, l := range bytes.Split(b, []byte("\n")) {
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		if !json.Valid(l) {
			return nil
		}
		items = append(items, l)
	}
	out, err := json.Marshal(items)
	if err != nil {
		return nil
	}
	return out
}

func tail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}

// renderMarkdown writes the report page: the machine, a table of phases,
// then each phase's results by kind.
func renderMarkdown(w io.Writer, doc *ReportDoc) {
	fmt.Fprintln(w, "# empo2 GPU check")
	fmt.Fprintln(w)
	var meta map[string]any
	if json.Unmarshal(doc.Meta, &meta) == nil && len(meta) > 0 {
		writeFields(w, meta, "- **%s**: %s\n")
	}
	verdict := "every phase that ran ended ok"
	if !doc.Pass {
		verdict = "**some phases failed or did not finish** (see below)"
	}
	fmt.Fprintf(w, "Result: %s.\n\n", verdict)
	fmt.Fprintln(w, "| phase | status | seconds | needs / budget (s) | note |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, p := range doc.Phases {
		fmt.Fprintf(w, "| %s | %s | %.1f | %.0f / %.0f | %s |\n", p.Name, p.Status, p.Seconds, p.Need, p.Budget, cell(p.Reason))
	}
	for _, p := range doc.Phases {
		if len(p.Docs) == 0 && len(p.LogTail) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s (%s)\n\n", p.Name, p.Status)
		names := make([]string, 0, len(p.Docs))
		for n := range p.Docs {
			names = append(names, n)
		}
		// the order the phase listed them in
		order := map[string]int{}
		for i, r := range p.Results {
			order[r] = i
		}
		sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
		for _, n := range names {
			renderDoc(w, n, p.Docs[n])
		}
		if len(p.LogTail) > 0 {
			fmt.Fprintf(w, "\nLast lines of %s:\n\n```\n%s\n```\n", p.Log, strings.Join(p.LogTail, "\n"))
		}
	}
}

// renderDoc renders one result document by its kind.
func renderDoc(w io.Writer, name string, raw json.RawMessage) {
	var head struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(raw, &head)
	fmt.Fprintf(w, "**%s**", name)
	switch head.Kind {
	case KindRollout:
		var r RolloutResult
		if json.Unmarshal(raw, &r) == nil {
			renderRollout(w, &r)
			return
		}
	case KindTrain:
		var r TrainResult
		if json.Unmarshal(raw, &r) == nil {
			renderTrain(w, &r)
			return
		}
	case KindBench:
		var r BenchResult
		if json.Unmarshal(raw, &r) == nil {
			renderBench(w, &r)
			return
		}
	}
	if strings.HasSuffix(name, ".jsonl") {
		renderMetrics(w, raw)
		return
	}
	// another kind (the Python script's, the build's, the memory poll's):
	// its fields, one per line
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		fmt.Fprintf(w, ": `%s`\n\n", truncate(string(raw), 400))
		return
	}
	fmt.Fprintln(w, ":")
	fmt.Fprintln(w)
	writeFields(w, m, "- %s: %s\n")
}

// writeFields lists a JSON object's fields in key order, one line each
// (format takes the key and the compact value), then a blank line.
func writeFields(w io.Writer, m map[string]any, format string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, format, k, compact(m[k]))
	}
	fmt.Fprintln(w)
}

func passWord(ok bool) string {
	if ok {
		return "pass"
	}
	return "**FAIL**"
}

func renderRollout(w io.Writer, r *RolloutResult) {
	fmt.Fprintf(w, " (rollout: %s, gpu layers %d, KV cache %s, flash attention %s, %d prompts × %d tokens, %.1f s): %s\n\n",
		filepath.Base(r.Model), r.GPULayers, cmp.Or(r.KVType, "f32"), cmp.Or(r.FlashAttn, "off"), len(r.Single), r.MaxTokens, r.Seconds, passWord(r.Pass))
	fmt.Fprintf(w, "- devices: %s\n", devicesText(r.Devices))
	b := r.BatchedVsSingle
	fmt.Fprintf(w, "- batched vs single: %d tokens equal, max |Δ log-prob| %s (tol %.3g), %d near ties: %s\n",
		b.Tokens, fmtFloat(b.MaxAbsLogp), b.Tol, len(b.Mismatches), passWord(b.Pass))
	if r.NoiseFloor != nil {
		fmt.Fprintf(w, "- noise floor against %s: %.3g\n", filepath.Base(r.NoiseModel), *r.NoiseFloor)
	}
	if a := r.Reference; a != nil {
		fmt.Fprintf(w, "- against the reference run: %d tokens compared, max |Δ log-prob| %s (tol %.3g, %s), %d mismatches: %s\n",
			a.Tokens, fmtFloat(a.MaxAbsLogp), a.Tol, a.TolSource, len(a.Mismatches), passWord(a.Pass))
		for _, m := range a.Mismatches {
			fmt.Fprintf(w, "  - prompt %d (batched %v) token %d: %d instead of %d, margin %s (tie: %v)\n",
				m.Prompt, m.Batched, m.Pos, m.Got, m.Want, fmtFloat(m.Margin), m.Tie)
		}
	}
	fmt.Fprintln(w)
}

func renderTrain(w io.Writer, r *TrainResult) {
	fmt.Fprintf(w, " (training graph: %s %s, device %s, %d sequences, %d tokens, %d trained; reference %s; %.1f s): %s\n\n",
		filepath.Base(r.Model), r.WeightType, r.Device, r.Sequences, r.Tokens, r.TrainedTokens, r.ReferenceBackend, r.Seconds, passWord(r.Pass))
	fmt.Fprintf(w, "| engine | backend | max abs Δ log-prob (tol %g) | worst grad rel (tol %g) | loss rel | splits | nodes by backend | ops on the CPU | result |\n",
		r.LogpTol, r.GradTol)
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, v := range r.Variants {
		ops := make([]string, 0, len(v.Sched.CPUOps))
		for _, o := range v.Sched.CPUOps {
			ops = append(ops, fmt.Sprintf("%s×%d", o.Op, o.Count))
		}
		opText := strings.Join(ops, ", ")
		if opText == "" {
			opText = "none"
		}
		worst := v.GradWorst
		if worst == "" {
			worst = "-"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s (%s) | %s | %d (scheduler: %d) | %s | %s | %s |\n", v.Name, v.Backend, fmtFloat(v.LogpMaxAbs),
			fmtFloat(v.GradWorstRel), worst, fmtFloat(v.LossRel), v.Memory.Splits, v.Sched.NSplits, compact(v.Sched.NodesByBackend), opText, passWord(v.Pass))
	}
	fmt.Fprintln(w)
}

func renderBench(w io.Writer, r *BenchResult) {
	fmt.Fprintf(w, " (benchmark: %s, %d layers, hidden %d, %d heads / %d KV, FFN %d, vocab %d, %s; %.4g M parameters; %.1f s)\n\n",
		filepath.Base(r.Model), r.Info.NLayer, r.Info.NEmbd, r.Info.NHead, r.Info.NHeadKV, r.Info.FFN, r.Info.NVocab, r.Info.WeightType,
		float64(r.Params)/1e6, r.Seconds)
	fmt.Fprintf(w, "- devices: %s; model load %.1f s, training engine on its weights %.1f s\n", devicesText(r.Devices), r.LoadSeconds, r.EngineSeconds)
	if len(r.Rollouts) > 0 {
		fmt.Fprintf(w, "\n| rollout batch | tokens (prompt %d + %d each) | seconds | tokens/s |\n| --- | --- | --- | --- |\n", r.PromptTokens, r.GenTokens)
		for _, x := range r.Rollouts {
			fmt.Fprintf(w, "| %d | %d | %.2f | %.1f |\n", x.Batch, x.Tokens, x.Seconds, x.TokPerSec)
		}
	}
	if len(r.Steps) > 0 {
		fmt.Fprintf(w, "\nLoRA rank %d, all targets (%d trainable parameters), %d × %d tokens in %d graphs (micro tokens %d), transpose in graph %v; π_old forward %.2f s\n\n",
			r.Rank, r.TrainableParams, r.TrainSeqs, r.TrainLen, r.MicroBatches, r.MicroTokens, r.TransposeInGraph, r.OldLogpSeconds)
		fmt.Fprintln(w, "| step | forward+backward s | AdamW s | step s | tokens/s |\n| --- | --- | --- | --- | --- |")
		for i, s := range r.Steps {
			fmt.Fprintf(w, "| %d | %.3f | %.3f | %.3f | %.1f |\n", i+1, s.ForwardBackward, s.AdamW, s.Seconds, s.TokPerSec)
		}
		m := r.Memory
		fmt.Fprintf(w, "\nTraining engine buffers: weights %s (transposed copies %s), LoRA+grads+moments %s, compute %s; splits %d\n",
			mib(m.Weights), mib(m.Transposed), mib(m.Params), mib(m.Compute), m.Splits)
	}
	fmt.Fprintln(w)
}

// renderMetrics shows the t_* (seconds per phase) fields of each line of a
// run's metrics.jsonl.
func renderMetrics(w io.Writer, raw json.RawMessage) {
	var rows []map[string]any
	if json.Unmarshal(raw, &rows) != nil {
		fmt.Fprintln(w, ": unreadable")
		return
	}
	fmt.Fprintln(w, " (`empo2 train` metrics, seconds per phase):")
	fmt.Fprintln(w)
	for _, r := range rows {
		keys := []string{}
		for k := range r {
			switch k {
			case "step", "mode", "episodes", "zero_var_groups", "trained_tokens", "gen_tokens", "rollout_tokens_per_s":
				keys = append(keys, k)
				continue
			}
			if strings.HasPrefix(k, "t_") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+"="+compact(r[k]))
		}
		fmt.Fprintf(w, "- %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

func devicesText(ds []llama.Device) string {
	parts := make([]string, 0, len(ds))
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", d.Name, d.Kind, d.Description))
	}
	return strings.Join(parts, "; ")
}

func fmtFloat(f jsonFloat) string { return fmt.Sprintf("%.3g", float64(f)) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func compact(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return truncate(string(b), 600)
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "/"), "\n", " ") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
