package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/empo2/empo2/internal/progress"
)

// ErrRemote: a live server asked to listen on an address that is not a
// loopback one without LiveOptions.AllowRemote.
var ErrRemote = errors.New("live report: not a loopback address")

// LiveOptions configure a live report (Live).
type LiveOptions struct {
	Smooth int    // as Options.Smooth
	Title  string // as Options.Title
	// Poll is how often the run files are looked at (default 1 s).
	Poll time.Duration
	// AllowRemote lets ListenAddr accept an address other hosts can reach.
	AllowRemote bool
	// Logf receives progress lines and warnings (nil = silent).
	Logf func(format string, args ...any)
}

// Live serves the report of run directories as a page that follows them
// while they run: it redraws the report's pictures (SVG, with Generate)
// whenever a run's config.yaml, metrics.jsonl, eval.jsonl or eval/ change,
// and pushes the new version to open pages over server-sent events (the
// page swaps its figures and tables in place, no reload). Above the report
// a table shows each run's finished steps and the step in progress with its
// phase, from the run's progress.json (internal/progress).
//
// Paths: / the page; /events the event stream (JSON LiveState per event);
// /state the current LiveState; /report the report part of the page; /g/N/
// the pictures of version N.
type Live struct {
	dirs []string
	opt  LiveOptions
	tmp  string // generations live in tmp/N

	mu       sync.Mutex
	state    LiveState
	report   []byte            // the report part of the page of state.Version
	inputs   string            // signature of the report's input files
	progress map[string]string // signature of each run's progress.json
	subs     map[chan struct{}]struct{}
	pushed   time.Time // when the run table was last rendered
}

// LiveState is what /state returns and /events pushes.
type LiveState struct {
	Version int       `json:"version"` // bumped by every redraw
	Updated time.Time `json:"updated"` // when the pictures were last drawn
	Error   string    `json:"error,omitempty"`
	Runs    []LiveRun `json:"runs"`
	// Table is the run table rendered as HTML (the page shows it as is).
	Table string `json:"table"`
}

// LiveRun is one run in a LiveState.
type LiveRun struct {
	Name        string             `json:"name"`
	Dir         string             `json:"dir"`
	Steps       int                `json:"steps"`       // metrics.jsonl lines (steps done)
	LastStep    float64            `json:"last_step"`   // the last step's number (0: none)
	StepsTotal  int                `json:"steps_total"` // config.yaml's steps (0: unknown)
	Last        map[string]float64 `json:"last,omitempty"`
	Evals       int                `json:"evals"`
	Waiting     string             `json:"waiting,omitempty"`  // why there is no data yet
	Progress    *progress.Progress `json:"progress,omitempty"` // the step in progress
	ProgressAge float64            `json:"progress_age_s,omitempty"`
}

// NewLive checks the run directories (each must be one, as for Generate,
// or a missing or empty folder: a run about to start, shown as waiting)
// and draws the first version.
func NewLive(dirs []string, opt LiveOptions) (*Live, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: no run directory given", ErrOptions)
	}
	if opt.Smooth < 0 {
		return nil, fmt.Errorf("%w: smoothing window %d < 0", ErrOptions, opt.Smooth)
	}
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	for _, d := range dirs {
		// A run not started yet is waited for; anything else that is not a
		// run directory is refused, as Generate refuses it.
		if _, err := LoadRun(d); err != nil && !waiting(d, err) {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "empo2-live-")
	if err != nil {
		return nil, err
	}
	l := &Live{dirs: dirs, opt: opt, tmp: tmp, progress: map[string]string{}, subs: map[chan struct{}]struct{}{}}
	l.refresh()
	return l, nil
}

// Close removes the drawn pictures.
func (l *Live) Close() error { return os.RemoveAll(l.tmp) }

// Run looks at the run files every Poll until ctx ends, redrawing and
// notifying open pages on change.
func (l *Live) Run(ctx context.Context) {
	t := time.NewTicker(l.opt.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.refresh()
		}
	}
}

// State is the current state.
func (l *Live) State() LiveState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// refresh redraws when the report's inputs changed and re-reads the
// progress files; open pages are told when anything changed, and every
// tableAge anyway (the age of a run's progress goes on: a run that died
// shows an ever older "step in progress").
func (l *Live) refresh() {
	inputs := inputSignature(l.dirs)
	prog := map[string]string{}
	for _, d := range l.dirs {
		prog[d] = fileSig(progress.Path(d))
	}
	l.mu.Lock()
	redraw := inputs != l.inputs || l.state.Version == 0
	changed := redraw || !equalMaps(prog, l.progress) || time.Since(l.pushed) >= tableAge
	l.mu.Unlock()
	if !changed {
		return
	}
	var report []byte
	var drawErr error
	version := 0
	if redraw {
		l.mu.Lock()
		version = l.state.Version + 1
		l.mu.Unlock()
		report, drawErr = l.draw(version)
	}
	runs := l.runs()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.progress = prog
	if redraw {
		l.inputs = inputs
		if drawErr != nil {
			l.state.Error = drawErr.Error()
			l.logf("live report: %v", drawErr)
		} else {
			l.state.Error = ""
			l.state.Version, l.state.Updated = version, time.Now()
			l.report = report
			// Keep the previous version's pictures for pages still loading them.
			for _, old := range []int{version - 2, version - 3} {
				if old > 0 {
					os.RemoveAll(filepath.Join(l.tmp, strconv.Itoa(old)))
				}
			}
		}
	}
	l.state.Runs = runs
	var tb bytes.Buffer
	if err := runTableTmpl.Execute(&tb, runs); err != nil {
		l.logf("live report: %v", err)
	}
	l.state.Table = tb.String()
	l.pushed = time.Now()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (l *Live) logf(format string, args ...any) {
	if l.opt.Logf != nil {
		l.opt.Logf(format, args...)
	}
}

// tableAge is how often the run table is rendered when nothing changed.
const tableAge = 5 * time.Second

// srcRe finds the page's relative picture sources and links.
var srcRe = regexp.MustCompile(`(<img src="|<a href=")([^"#/][^"]*)"`)

// draw writes version's pictures and page into tmp/version and returns
// the page's report part (picture paths made absolute: /g/version/…) and
// nothing else of report.html (the live page has its own head, with the
// report's style).
func (l *Live) draw(version int) (report []byte, err error) {
	var dirs []string
	for _, d := range l.dirs {
		if _, err := LoadRun(d); err == nil || !waiting(d, err) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return []byte(`<p id="waiting">No run has written anything yet: the report appears with the first files.</p>`), nil
	}
	out := filepath.Join(l.tmp, strconv.Itoa(version))
	res, err := Generate(dirs, Options{Out: out, Smooth: l.opt.Smooth, Formats: []string{"svg"}, Title: l.opt.Title, Logf: l.opt.Logf})
	if err != nil {
		os.RemoveAll(out)
		return nil, err
	}
	page, err := os.ReadFile(res.HTML)
	if err != nil {
		return nil, err
	}
	i, j := bytes.Index(page, []byte("<body>")), bytes.LastIndex(page, []byte("</body>"))
	if i < 0 || j < i {
		return nil, errors.New("live report: report.html has no <body>")
	}
	body := page[i+len("<body>") : j]
	return srcRe.ReplaceAll(body, []byte(`${1}/g/`+strconv.Itoa(version)+`/${2}"`)), nil
}

// runs reads each run's state for the run table.
func (l *Live) runs() []LiveRun {
	var out []LiveRun
	for _, d := range l.dirs {
		abs, _ := filepath.Abs(d)
		lr := LiveRun{Name: filepath.Base(abs), Dir: d}
		r, err := LoadRun(d)
		if err != nil {
			lr.Waiting = "waiting for the run to start"
			if !waiting(d, err) {
				lr.Waiting = err.Error()
			}
		} else {
			deriveStepTime(r)
			lr.Steps, lr.Evals = len(r.Metrics), len(r.Evals)
			if n := len(r.Metrics); n > 0 {
				last := r.Metrics[n-1]
				lr.LastStep = last.Step
				lr.Last = map[string]float64{}
				for _, k := range []string{"score_mean", "success_rate", "approx_kl", "t_step"} {
					if v, ok := last.Values[k]; ok {
						lr.Last[k] = v
					}
				}
			}
			if v, ok := toFloat(r.Config["steps"]); ok {
				lr.StepsTotal = int(v)
			}
		}
		if p, err := progress.ReadFile(d); err == nil {
			lr.Progress = &p
			if !p.Time.IsZero() {
				lr.ProgressAge = math.Round(time.Since(p.Time).Seconds()*10) / 10
			}
		}
		out = append(out, lr)
	}
	disambiguateLive(out)
	return out
}

// waiting reports whether d is a run not started yet: err is LoadRun's
// ErrNoRun and d is missing or an empty folder.
func waiting(d string, err error) bool {
	if !errors.Is(err, ErrNoRun) {
		return false
	}
	ents, rerr := os.ReadDir(d)
	return errors.Is(rerr, os.ErrNotExist) || (rerr == nil && len(ents) == 0)
}

func disambiguateLive(runs []LiveRun) {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	for i, r := range runs {
		if count[r.Name] > 1 {
			abs, _ := filepath.Abs(r.Dir)
			runs[i].Name = filepath.Base(filepath.Dir(abs)) + "/" + r.Name
		}
	}
}

// inputSignature is the size and modification time of every file the
// report reads, so that any write to them changes it.
func inputSignature(dirs []string) string {
	var b strings.Builder
	for _, d := range dirs {
		for _, f := range []string{ConfigFile, MetricsFile, EvalLogFile} {
			b.WriteString(fileSig(filepath.Join(d, f)))
		}
		ents, _ := os.ReadDir(filepath.Join(d, EvalDir))
		for _, e := range ents {
			b.WriteString(e.Name() + fileSig(filepath.Join(d, EvalDir, e.Name())))
		}
		b.WriteByte(0)
	}
	return b.String()
}

func fileSig(p string) string {
	st, err := os.Stat(p)
	if err != nil {
		return "-;"
	}
	return fmt.Sprintf("%d:%d;", st.Size(), st.ModTime().UnixNano())
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Handler serves the page, its pictures and the event stream.
func (l *Live) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", l.servePage)
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		b, v := l.report, l.state.Version
		l.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Report-Version", strconv.Itoa(v))
		w.Write(b)
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(l.State())
	})
	mux.HandleFunc("GET /events", l.serveEvents)
	mux.HandleFunc("GET /g/{version}/{file}", func(w http.ResponseWriter, r *http.Request) {
		v, err := strconv.Atoi(r.PathValue("version"))
		name := r.PathValue("file")
		if err != nil || v <= 0 || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			http.NotFound(w, r)
			return
		}
		// A version's pictures never change: cache them.
		w.Header().Set("Cache-Control", "max-age=3600, immutable")
		http.ServeFile(w, r, filepath.Join(l.tmp, strconv.Itoa(v), name))
	})
	return mux
}

func (l *Live) servePage(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	st, report := l.state, l.report
	l.mu.Unlock()
	title := l.opt.Title
	if title == "" {
		title = "EMPO² training report"
	}
	stateJSON, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	err := livePageTmpl.Execute(w, map[string]any{
		"Title":  title,
		"Report": template.HTML(report),
		"Table":  template.HTML(st.Table),
		"State":  st,
		"JSON":   template.JS(stateJSON),
	})
	if err != nil {
		l.logf("live report: %v", err)
	}
}

func (l *Live) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	send := func() bool {
		b, _ := json.Marshal(l.State())
		_, err := fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
		return err == nil
	}
	if !send() {
		return
	}
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ch:
			if !send() {
				return
			}
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// ListenAddr opens addr for the live page. A bare port ("8080") means
// 127.0.0.1:PORT. Unless allowRemote, the host must be a loopback address
// or "localhost" (":8080" and "0.0.0.0:8080" listen on every interface and
// are refused: the page shows the runs' paths, configs and results).
func ListenAddr(addr string, allowRemote bool) (net.Listener, error) {
	if _, err := strconv.Atoi(addr); err == nil {
		addr = "127.0.0.1:" + addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --serve %q: %v (want HOST:PORT, e.g. 127.0.0.1:8080)", ErrOptions, addr, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("%w: %q listens where other machines can reach it; serve on 127.0.0.1 (and use ssh -L to watch from elsewhere), or pass --allow-remote", ErrRemote, addr)
	}
	return net.Listen("tcp", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fmtDuration prints seconds as "42 s", "3.5 min", "2.1 h".
func fmtDuration(s float64) string {
	switch {
	case s < 90:
		return fmt.Sprintf("%.0f s", s)
	case s < 5400:
		return fmt.Sprintf("%.1f min", s/60)
	}
	return fmt.Sprintf("%.1f h", s/3600)
}

var runTableTmpl = template.Must(template.New("runs").Funcs(template.FuncMap{
	"num": fmtNum,
	"dur": fmtDuration,
	"get": func(m map[string]float64, k string) string {
		if v, ok := m[k]; ok {
			return fmtNum(v)
		}
		return "—"
	},
	"tps": func(v float64) string { return fmt.Sprintf("%.0f", v) },
}).Parse(`<table id="live-runs">
<caption>Runs</caption>
<thead><tr><th>run</th><th>steps done</th><th>score</th><th>success</th><th>approx. KL</th><th>s/step</th><th>step in progress</th></tr></thead>
<tbody>
{{- range .}}
<tr class="live-run" data-run="{{.Name}}" data-steps="{{.Steps}}" data-last-step="{{.LastStep}}"{{with .Progress}} data-progress-step="{{.Step}}" data-phase="{{.Phase}}"{{end}}>
<td title="{{.Dir}}">{{.Name}}</td>
<td>{{if .Waiting}}<i>{{.Waiting}}</i>{{else}}{{.Steps}}{{if .StepsTotal}} / {{.StepsTotal}}{{end}}{{end}}</td>
<td>{{get .Last "score_mean"}}</td><td>{{get .Last "success_rate"}}</td><td>{{get .Last "approx_kl"}}</td><td>{{get .Last "t_step"}}</td>
<td class="live-progress">{{with .Progress}}{{if eq .Phase "done"}}finished{{else}}step {{.Step}} · <b class="phase">{{.Phase}}</b>{{if .EpisodesTotal}} · {{.EpisodesDone}}/{{.EpisodesTotal}} episodes{{end}}{{if gt .TokensPerS 0.0}} · {{tps .TokensPerS}} tok/s{{end}}{{if gt .ETAStepS 0.0}} · step ETA {{dur .ETAStepS}}{{end}}{{if gt .ETARunS 0.0}} · run ETA {{dur .ETARunS}}{{end}}{{end}}{{end}}{{if .Progress}} <span class="age">({{dur .ProgressAge}} ago)</span>{{else}}—{{end}}</td>
</tr>
{{- end}}
</tbody>
</table>`))

// livePageTmpl shares the report page's style (pageTmpl's "style").
var livePageTmpl = template.Must(template.Must(pageTmpl.Clone()).New("live").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<title>{{.Title}}</title>
{{template "style"}}
<style>
#live { position: sticky; top: 0; background: #fff; border-bottom: 2px solid #2a6fdb; padding: 0.3em 0 0.2em; z-index: 10; }
#live table { margin: 0.3em 0; }
#live .age { color: #888; }
#live-status { color: #555; font-size: 0.9em; }
#live-status.off { color: #a00; }
#live-error { color: #a00; }
</style>
</head>
<body>
<div id="live" data-version="{{.State.Version}}">
<div id="live-table">{{.Table}}</div>
<p id="live-status">live · version {{.State.Version}}</p>
<p id="live-error">{{.State.Error}}</p>
</div>
<div id="report">
{{.Report}}
</div>
<script>
(function () {
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var version = {{.JSON}}.version, latest = version;
  var loading = false;
  // sync swaps in the report part of the latest version (figures and tables)
  function sync() {
    if (loading || latest === version) return;
    loading = true;
    fetch("/report", {cache: "no-store"}).then(function (r) {
      var v = Number(r.headers.get("X-Report-Version"));
      return r.text().then(function (html) {
        var y = window.scrollY;
        document.getElementById("report").innerHTML = html;
        window.scrollTo(0, y);
        version = v;
        live.dataset.version = String(v);
      });
    }).finally(function () { loading = false; setTimeout(sync, 0); });
  }
  function show(st) {
    document.getElementById("live-table").innerHTML = st.table;
    document.getElementById("live-error").textContent = st.error || "";
    status.className = "";
    status.textContent = "live · version " + st.version + " · pictures drawn " + new Date(st.updated).toLocaleTimeString() + " · " + new Date().toLocaleTimeString();
    latest = Math.max(latest, st.version);
    sync();
  }
  function connect() {
    var es = new EventSource("/events");
    es.onmessage = function (e) { show(JSON.parse(e.data)); };
    es.onerror = function () { status.className = "off"; status.textContent = "disconnected: retrying…"; };
  }
  connect();
})();
</script>
</body>
</html>
`))
