package tfevents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Run-file names this file reads (runfiles.MetricsFile and EvalFile; not
// imported, to keep the package a leaf).
const (
	metricsFile = "metrics.jsonl"
	evalFile    = "eval.jsonl"
)

// FilePrefix starts every event file's name (TensorBoard loads the files
// whose names contain "tfevents").
const FilePrefix = "events.out.tfevents."

// Config is the `logging` section of a run configuration.
type Config struct {
	TensorBoard bool `yaml:"tensorboard" doc:"write TensorBoard event files (events.out.tfevents.*) beside metrics.jsonl: every scalar of the report, step = training step; tensorboard --logdir RUN_DIR"`
}

// DefaultConfig writes event files.
func DefaultConfig() Config { return Config{TensorBoard: true} }

// metricTags maps metrics.jsonl fields (runfiles.Metrics) to TensorBoard
// tags, grouped as TRL/verl users read them. A numeric field not listed is
// written as other/<field>; step and seed are not scalars.
var metricTags = map[string]string{
	"score_mean":            "train/score",
	"success_rate":          "train/success",
	"reward_mean":           "train/reward",
	"intrinsic_mean":        "train/intrinsic_reward",
	"episodes":              "train/episodes",
	"zero_var_groups":       "train/zero_var_groups",
	"loss":                  "update/loss",
	"clip_frac":             "update/clip_frac",
	"approx_kl":             "update/kl",
	"entropy":               "update/entropy",
	"grad_norm":             "update/grad_norm",
	"loss_scale_skips":      "update/loss_scale_skips",
	"lr":                    "update/lr",
	"updates":               "update/updates",
	"masked_seqs":           "update/masked_seqs",
	"sequences":             "update/sequences",
	"trained_tokens":        "update/trained_tokens",
	"sample_steps":          "update/sample_steps",
	"sample_tokens":         "update/sample_tokens",
	"unpacked_tokens":       "update/unpacked_tokens",
	"tips_retrieved_mean":   "memory/tips_retrieved",
	"tips_written":          "memory/tips_written",
	"tips_true_frac":        "memory/tips_true_frac",
	"tips_wellformed_frac":  "memory/tips_wellformed_frac",
	"gen_tokens":            "rollout/gen_tokens",
	"env_steps":             "rollout/env_steps",
	"prompt_tokens_seen":    "rollout/prompt_tokens_seen",
	"prompt_tokens_decoded": "rollout/prompt_tokens_decoded",
	"prompt_tokens_unique":  "rollout/prompt_tokens_unique",
	"context":               "rollout/context",
	"rollout_tokens_per_s":  "perf/rollout_tokens_per_s",
	"env_steps_per_s":       "perf/env_steps_per_s",
	"update_compute_bytes":  "perf/update_compute_bytes",
	"max_rss_bytes":         "perf/max_rss_bytes",
	"t_rollout":             "time/rollout_s",
	"t_embed_retrieve":      "time/embed_retrieve_s",
	"t_tips":                "time/tips_s",
	"t_old_logp":            "time/old_logp_s",
	"t_update":              "time/update_s",
	"t_step":                "time/step_s",
}

// nestedTags: object fields of a metrics line whose members are counts,
// written as <prefix><member>.
var nestedTags = map[string]string{
	"end_reasons": "episodes/end_",
	"modes":       "mode/episodes_",
}

// notScalars are metrics fields that are keys, not curves.
var notScalars = map[string]bool{"step": true, "seed": true, "mode": true, "time": true}

// MetricTag is the TensorBoard tag of a metrics.jsonl field.
func MetricTag(field string) string {
	if t, ok := metricTags[field]; ok {
		return t
	}
	return "other/" + field
}

// MetricValues turns one metrics.jsonl object into its step, wall time
// (its "time", zero when absent) and scalars, sorted by tag. A step's mode
// ("mode": "off-policy", …) is the scalar mode/<mode> = 1.
func MetricValues(obj map[string]any) (step int64, wall time.Time, vals []Value, err error) {
	step, err = stepOf(obj)
	if err != nil {
		return 0, wall, nil, err
	}
	if s, ok := obj["time"].(string); ok {
		wall, _ = time.Parse(time.RFC3339Nano, s)
	}
	for k, v := range obj {
		if notScalars[k] {
			continue
		}
		if f, ok := number(v); ok {
			vals = append(vals, Value{MetricTag(k), float32(f)})
			continue
		}
		if m, ok := v.(map[string]any); ok {
			prefix, known := nestedTags[k]
			if !known {
				prefix = "other/" + k + "/"
			}
			for sub, x := range m {
				if f, ok := number(x); ok {
					vals = append(vals, Value{prefix + sub, float32(f)})
				}
			}
		}
	}
	if m, ok := obj["mode"].(string); ok && m != "" && m != "mixed" {
		vals = append(vals, Value{"mode/" + m, 1})
	}
	sortValues(vals)
	return step, wall, vals, nil
}

// EvalValues turns one eval.jsonl object ({"step", "memory_off":{…},
// "memory_on":{…}}) into its step and scalars eval/<side>/score and
// eval/<side>/success.
func EvalValues(obj map[string]any) (step int64, vals []Value, err error) {
	step, err = stepOf(obj)
	if err != nil {
		return 0, nil, err
	}
	for _, side := range []string{"memory_off", "memory_on"} {
		m, ok := obj[side].(map[string]any)
		if !ok {
			continue
		}
		for field, name := range map[string]string{"score_mean": "score", "success_rate": "success"} {
			if f, ok := number(m[field]); ok {
				vals = append(vals, Value{"eval/" + side + "/" + name, float32(f)})
			}
		}
	}
	sortValues(vals)
	return step, vals, nil
}

func sortValues(vals []Value) {
	sort.Slice(vals, func(i, j int) bool { return vals[i].Tag < vals[j].Tag })
}

func stepOf(obj map[string]any) (int64, error) {
	f, ok := number(obj["step"])
	if !ok || f != math.Trunc(f) {
		return 0, errors.New("no integer \"step\"")
	}
	return int64(f), nil
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// RunLog is a run directory's event file, open for appending.
type RunLog struct {
	f     *os.File
	w     *Writer
	path  string
	times map[int64]time.Time // wall time of each step's metrics line
}

// OpenRun (re)writes dir's event file from its metrics.jsonl and eval.jsonl,
// the truth about a run, and leaves it open for the run's next lines: a
// new file events.out.tfevents.<unix seconds>.<host>.<pid> is written
// whole (a temporary file renamed into place), then every other event file
// of dir is removed. So after a kill -9 and a resume (which rolls the JSONL
// files back to the checkpoint) the directory holds one event file with one
// value per step and tag. A truncated last JSONL line is skipped; a line
// that does not parse is an error.
func OpenRun(dir string) (*RunLog, error) {
	var buf bytes.Buffer
	l := &RunLog{w: NewWriter(&buf), times: map[int64]time.Time{}}
	if err := l.w.Write(Event{WallTime: seconds(time.Now()), FileVersion: FileVersion}); err != nil {
		return nil, err
	}
	for _, name := range []string{metricsFile, evalFile} {
		lines, err := readJSONL(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i, b := range lines {
			if err := l.add(name, b); err != nil {
				return nil, fmt.Errorf("tfevents: %s:%d: %w", filepath.Join(dir, name), i+1, err)
			}
		}
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	name := fmt.Sprintf("%s%010d.%s.%d", FilePrefix, time.Now().Unix(), strings.ReplaceAll(host, "/", "_"), os.Getpid())
	l.path = filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return nil, err
	}
	_, err = tmp.Write(buf.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("tfevents: %w", err)
	}
	old, _ := Files(dir)
	for _, p := range old {
		if p != l.path {
			if err := os.Remove(p); err != nil {
				return nil, fmt.Errorf("tfevents: %w", err)
			}
		}
	}
	if l.f, err = os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, err
	}
	l.w = NewWriter(l.f)
	return l, nil
}

// Files lists dir's event files, sorted by name.
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasPrefix(e.Name(), FilePrefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// Scalars reads an event file written by this package, checking every
// record's CRCs and that the file version comes first, and returns its
// scalars by tag and step. A (tag, step) written twice is an error: a run's
// file holds one value per step.
func Scalars(path string) (map[string]map[int64]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	evs, err := ReadEvents(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(evs) == 0 || evs[0].FileVersion != FileVersion {
		return nil, fmt.Errorf("%s: the first event is not the file version %q", path, FileVersion)
	}
	out := map[string]map[int64]float32{}
	for _, e := range evs[1:] {
		for _, v := range e.Values {
			if out[v.Tag] == nil {
				out[v.Tag] = map[int64]float32{}
			}
			if _, dup := out[v.Tag][e.Step]; dup {
				return nil, fmt.Errorf("%s: %s at step %d written twice", path, v.Tag, e.Step)
			}
			out[v.Tag][e.Step] = v.Value
		}
	}
	return out, nil
}

// Path is the event file's path.
func (l *RunLog) Path() string { return l.path }

// Metrics appends the scalars of one metrics.jsonl line (the JSON object,
// with or without its newline).
func (l *RunLog) Metrics(line []byte) error { return l.add(metricsFile, line) }

// Eval appends the scalars of one eval.jsonl line.
func (l *RunLog) Eval(line []byte) error { return l.add(evalFile, line) }

func (l *RunLog) add(file string, line []byte) error {
	var obj map[string]any
	if err := json.Unmarshal(line, &obj); err != nil {
		return err
	}
	var step int64
	var wall time.Time
	var vals []Value
	var err error
	if file == metricsFile {
		step, wall, vals, err = MetricValues(obj)
		if err == nil && !wall.IsZero() {
			l.times[step] = wall
		}
	} else {
		step, vals, err = EvalValues(obj)
		wall = l.times[step] // eval lines carry no time: their step's
	}
	if err != nil || len(vals) == 0 {
		return err
	}
	if wall.IsZero() {
		wall = time.Now()
	}
	return l.w.Write(Event{WallTime: seconds(wall), Step: step, Values: vals})
}

// Close closes the file.
func (l *RunLog) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// readJSONL returns the non-blank lines of path, without a truncated last
// line (no trailing newline: a write cut short).
func readJSONL(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1]
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			out = append(out, append([]byte(nil), line...))
		}
	}
	return out, sc.Err()
}
