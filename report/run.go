package report

import (
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

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/runfiles"
)

// Sentinel errors; every error this package returns wraps one of them.
var (
	// ErrNoRun: the directory does not exist or holds none of the run files.
	ErrNoRun = errors.New("not a run directory")
	// ErrCorrupt: a JSONL line (other than a truncated last line) or a JSON
	// or YAML file does not parse; the message names the file and line.
	ErrCorrupt = errors.New("corrupt run file")
	// ErrRead: a run file exists but cannot be read.
	ErrRead = errors.New("cannot read run file")
	// ErrOptions: invalid report options (formats, smoothing window, output).
	ErrOptions = errors.New("invalid report options")
)

// Run file names inside a run directory (package runfiles names them).
const (
	ConfigFile      = runfiles.ConfigFile
	MetricsFile     = runfiles.MetricsFile
	EvalLogFile     = runfiles.EvalFile
	EvalDir         = runfiles.EvalDir
	checkpointsName = runfiles.CheckpointsDir
)

// Row is one line of metrics.jsonl: one training step.
type Row struct {
	Line   int                // 1-based line number in metrics.jsonl
	Step   float64            // "step" (the row index + 1 when absent)
	Mode   string             // "off-policy", "on-policy-tips", "on-policy", "mixed", … ("" when absent)
	Modes  map[string]float64 // "modes": episodes per mode when the mode is drawn per rollout (nil when absent)
	Time   time.Time          // "time" (RFC3339), zero when absent
	Values map[string]float64 // every finite numeric field, by name
}

// EvalSide is one memory setting of an evaluation (runfiles.EvalResult).
type EvalSide struct {
	ScoreMean   *float64            `json:"score_mean"`
	SuccessRate *float64            `json:"success_rate"`
	Episodes    int                 `json:"episodes"`
	Tasks       map[string]TaskEval `json:"-"`
}

// TaskEval is one task's line of an evaluation; fields the report does not
// know are ignored.
type TaskEval struct {
	ScoreMean   *float64 `json:"score_mean"`
	SuccessRate *float64 `json:"success_rate"`
	Episodes    int      `json:"episodes"`
}

// UnmarshalJSON decodes the known fields and every task whose entry is an
// object (other task entry shapes are ignored rather than failing the report).
func (s *EvalSide) UnmarshalJSON(b []byte) error {
	var raw struct {
		ScoreMean   *float64                   `json:"score_mean"`
		SuccessRate *float64                   `json:"success_rate"`
		Episodes    int                        `json:"episodes"`
		Tasks       map[string]json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s.ScoreMean, s.SuccessRate, s.Episodes = raw.ScoreMean, raw.SuccessRate, raw.Episodes
	for name, m := range raw.Tasks {
		var te TaskEval
		if json.Unmarshal(m, &te) != nil {
			continue
		}
		if s.Tasks == nil {
			s.Tasks = map[string]TaskEval{}
		}
		s.Tasks[name] = te
	}
	return nil
}

// EvalResult is `empo2 eval --json`'s object (runfiles.EvalReport) and the
// body of an eval.jsonl line (runfiles.EvalLine).
type EvalResult struct {
	MemoryOff *EvalSide `json:"memory_off"`
	MemoryOn  *EvalSide `json:"memory_on"`
}

// Side returns the memory-off (on=false) or memory-on side, nil when absent.
func (e EvalResult) Side(on bool) *EvalSide {
	if on {
		return e.MemoryOn
	}
	return e.MemoryOff
}

// PeriodicEval is one line of eval.jsonl.
type PeriodicEval struct {
	Step float64
	Line int
	EvalResult
}

// EvalFile is one JSON file found under <run>/eval/.
type EvalFile struct {
	Name string // file name without .json
	Path string
	EvalResult
	OOD *OOD // non-nil for an OOD adaptation result
}

// Run is one loaded run directory.
type Run struct {
	Dir       string
	Name      string         // the directory's base name
	Config    map[string]any // config.yaml, nil when absent
	ConfigKey string         // canonical form of Config without seed keys ("" = none)
	Seed      *int64         // from config.yaml or metrics.jsonl
	Metrics   []Row          // sorted by step, one row per step (last occurrence wins)
	Evals     []PeriodicEval // sorted by step
	EvalFiles []EvalFile     // sorted by name
	Warnings  []string       // problems that did not stop the report
}

func (r *Run) warnf(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// LoadRun reads a run directory. A directory with none of config.yaml,
// metrics.jsonl, eval.jsonl or eval/ is ErrNoRun; any single missing file is
// only noted in Warnings.
func LoadRun(dir string) (*Run, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoRun, dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNoRun, dir)
	}
	abs, _ := filepath.Abs(dir)
	r := &Run{Dir: dir, Name: filepath.Base(abs)}
	found := false

	if b, err := os.ReadFile(filepath.Join(dir, ConfigFile)); err == nil {
		found = true
		if err := r.parseConfig(filepath.Join(dir, ConfigFile), b); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %v", ErrRead, err)
	} else {
		r.warnf("%s: no %s (the run is not grouped with others)", r.Name, ConfigFile)
	}

	mpath := filepath.Join(dir, MetricsFile)
	if lines, err := readJSONL(mpath, &r.Warnings); err == nil {
		found = true
		if err := r.parseMetrics(mpath, lines); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %v", ErrRead, err)
	} else {
		r.warnf("%s: no %s (no learning curves)", r.Name, MetricsFile)
	}

	epath := filepath.Join(dir, EvalLogFile)
	if lines, err := readJSONL(epath, &r.Warnings); err == nil {
		found = true
		if err := r.parseEvalLog(epath, lines); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %v", ErrRead, err)
	}

	if ents, err := os.ReadDir(filepath.Join(dir, EvalDir)); err == nil {
		found = true
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			r.loadEvalFile(filepath.Join(dir, EvalDir, e.Name()))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, checkpointsName)); err == nil {
		found = true
	}
	if !found {
		return nil, fmt.Errorf("%w: %s has none of %s, %s, %s, %s/", ErrNoRun, dir, ConfigFile, MetricsFile, EvalLogFile, EvalDir)
	}
	if r.Seed == nil {
		for _, row := range r.Metrics {
			if v, ok := row.Values[keySeed]; ok {
				s := int64(v)
				r.Seed = &s
				break
			}
		}
	}
	return r, nil
}

// jsonlLine is one non-blank line of a JSONL file.
type jsonlLine struct {
	n   int
	obj map[string]any
}

// readJSONL parses every non-blank line of path as a JSON object. A line that
// does not parse is an ErrCorrupt error naming path and line, unless it is the
// last line and the file does not end in a newline (a write cut short by a
// kill -9): that line is skipped and a warning appended.
func readJSONL(path string, warnings *[]string) ([]jsonlLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	truncatedTail := len(b) > 0 && b[len(b)-1] != '\n'
	parts := bytes.Split(b, []byte{'\n'})
	var out []jsonlLine
	for i, p := range parts {
		p = bytes.TrimSpace(p)
		if len(p) == 0 {
			continue
		}
		var obj map[string]any
		d := json.NewDecoder(bytes.NewReader(p))
		err := d.Decode(&obj)
		if err == nil && d.More() {
			err = errors.New("extra data after the JSON object")
		}
		if err == nil && obj == nil {
			err = errors.New("not a JSON object")
		}
		if err != nil {
			if i == len(parts)-1 && truncatedTail {
				*warnings = append(*warnings, fmt.Sprintf("%s:%d: truncated last line skipped (a write cut short, e.g. by kill -9)", path, i+1))
				continue
			}
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrCorrupt, path, i+1, err)
		}
		out = append(out, jsonlLine{n: i + 1, obj: obj})
	}
	return out, nil
}

func (r *Run) parseConfig(path string, b []byte) error {
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	r.Config = cfg
	if s, ok := cfg["seed"]; ok {
		if v, ok := toFloat(s); ok {
			seed := int64(v)
			r.Seed = &seed
		}
	}
	canon, err := json.Marshal(jsonable(stripKeys(cfg)))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	r.ConfigKey = string(canon)
	return nil
}

// groupIgnoredKeys are removed (at every level) before configs are compared:
// runs that differ only in these are seeds of one experiment.
var groupIgnoredKeys = map[string]bool{"seed": true, "run_dir": true, "resume": true}

// groupIgnoredTopKeys are removed at the top level only: how long a run was
// asked to go (`steps`, raised on --resume), on how many threads, and what
// it wrote for watching it (`logging`) do not make it another experiment.
var groupIgnoredTopKeys = map[string]bool{"steps": true, "threads": true, "logging": true}

// stripKeys returns a deep copy of the config without the ignored keys.
func stripKeys(v any) any { return stripKeysAt(v, true) }

func stripKeysAt(v any, top bool) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			if !groupIgnoredKeys[k] && !(top && groupIgnoredTopKeys[k]) {
				m[k] = stripKeysAt(x, false)
			}
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = stripKeysAt(x, false)
		}
		return s
	}
	return v
}

// jsonable converts YAML-decoded values (map[any]any can occur for non-string
// keys) into values encoding/json accepts; map keys are sorted by json.Marshal.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = jsonable(x)
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = jsonable(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = jsonable(x)
		}
		return s
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return fmt.Sprint(t)
		}
	case time.Time:
		return t.Format(time.RFC3339Nano)
	}
	return v
}

func toFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, !math.IsNaN(t) && !math.IsInf(t, 0)
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case uint64:
		return float64(t), true
	}
	return 0, false
}

func (r *Run) parseMetrics(path string, lines []jsonlLine) error {
	bystep := map[float64]int{}
	for i, l := range lines {
		row := Row{Line: l.n, Step: float64(i + 1), Values: map[string]float64{}}
		for k, v := range l.obj {
			switch k {
			case keyMode:
				if s, ok := v.(string); ok {
					row.Mode = s
				}
				continue
			case keyModes:
				if m, ok := v.(map[string]any); ok {
					for mode, n := range m {
						if f, ok := toFloat(n); ok && f > 0 {
							if row.Modes == nil {
								row.Modes = map[string]float64{}
							}
							row.Modes[mode] = f
						}
					}
				}
				continue
			case keyTime:
				if s, ok := v.(string); ok {
					if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
						row.Time = t
					}
				}
				continue
			}
			if f, ok := toFloat(v); ok {
				row.Values[k] = f
			}
		}
		if s, ok := row.Values[keyStep]; ok {
			row.Step = s
		} else if _, present := l.obj[keyStep]; present {
			return fmt.Errorf("%w: %s:%d: \"step\" is not a number", ErrCorrupt, path, l.n)
		}
		if j, dup := bystep[row.Step]; dup {
			r.warnf("%s:%d: step %g repeats line %d (a resumed run); the later line is used", path, l.n, row.Step, r.Metrics[j].Line)
			r.Metrics[j] = row
			continue
		}
		bystep[row.Step] = len(r.Metrics)
		r.Metrics = append(r.Metrics, row)
	}
	sort.SliceStable(r.Metrics, func(i, j int) bool { return r.Metrics[i].Step < r.Metrics[j].Step })
	return nil
}

func (r *Run) parseEvalLog(path string, lines []jsonlLine) error {
	for _, l := range lines {
		b, _ := json.Marshal(l.obj)
		var pe struct {
			Step *float64 `json:"step"`
			EvalResult
		}
		if err := json.Unmarshal(b, &pe); err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrCorrupt, path, l.n, err)
		}
		if pe.Step == nil {
			return fmt.Errorf("%w: %s:%d: no \"step\"", ErrCorrupt, path, l.n)
		}
		if pe.MemoryOff == nil && pe.MemoryOn == nil {
			r.warnf("%s:%d: neither memory_off nor memory_on; line skipped", path, l.n)
			continue
		}
		r.Evals = append(r.Evals, PeriodicEval{Step: *pe.Step, Line: l.n, EvalResult: pe.EvalResult})
	}
	sort.SliceStable(r.Evals, func(i, j int) bool { return r.Evals[i].Step < r.Evals[j].Step })
	return nil
}

// loadEvalFile reads one eval/*.json file. Files that are not JSON objects or
// match neither the eval nor the OOD schema are skipped with a warning, so a
// stray file never stops a report.
func (r *Run) loadEvalFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		r.warnf("%s: %v; skipped", path, err)
		return
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		r.warnf("%s: not a JSON object (%v); skipped", path, err)
		return
	}
	ef := EvalFile{Name: strings.TrimSuffix(filepath.Base(path), ".json"), Path: path}
	if ood, ok, err := parseOOD(probe); ok {
		if err != nil {
			r.warnf("%s: OOD result: %v; skipped", path, err)
			return
		}
		ef.OOD = ood
	} else {
		if err := json.Unmarshal(b, &ef.EvalResult); err != nil {
			r.warnf("%s: %v; skipped", path, err)
			return
		}
		if ef.MemoryOff == nil && ef.MemoryOn == nil {
			r.warnf("%s: unknown schema (no memory_off, memory_on or OOD trials); skipped", path)
			return
		}
	}
	r.EvalFiles = append(r.EvalFiles, ef)
	sort.SliceStable(r.EvalFiles, func(i, j int) bool { return r.EvalFiles[i].Name < r.EvalFiles[j].Name })
}

// Series returns the run's (step, value) points of a metrics field, in step order.
func (r *Run) Series(key string) (xs, ys []float64) {
	for _, row := range r.Metrics {
		if v, ok := row.Values[key]; ok {
			xs = append(xs, row.Step)
			ys = append(ys, v)
		}
	}
	return xs, ys
}

// Has reports whether any metrics row has the field.
func (r *Run) Has(key string) bool {
	for _, row := range r.Metrics {
		if _, ok := row.Values[key]; ok {
			return true
		}
	}
	return false
}
