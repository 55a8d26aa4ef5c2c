package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/empo2/empo2/internal/headless"
	"github.com/empo2/empo2/internal/progress"
)

// liveRun makes a run directory with a config and steps 1..n.
func liveRun(t *testing.T, dir string, lr float64, n int) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(fmt.Sprintf("seed: 1\nsteps: 12\nupdate:\n  lr: %g\n", lr)), 0o644))
	appendSteps(t, dir, lr, 1, n)
}

// appendSteps appends metrics lines of steps from..to, as train does.
func appendSteps(t *testing.T, dir string, lr float64, from, to int) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	defer f.Close()
	for s := from; s <= to; s++ {
		x := float64(s)
		b, _ := json.Marshal(map[string]any{"step": s, "mode": "on-policy", "seed": 1,
			"time":       time.Date(2026, 12, 1, 20, 0, s, 0, time.UTC).Format(time.RFC3339),
			"score_mean": 20 + 60*(1-math.Exp(-x*lr)), "success_rate": 0.8 * (1 - math.Exp(-x*lr)),
			"reward_mean": 0.2 + 0.6*(1-math.Exp(-x*lr)), "loss": 0.5 / x, "approx_kl": 0.002 * x, "clip_frac": 0.05,
			"t_rollout": 3.0, "t_update": 1.5, "rollout_tokens_per_s": 240})
		_, err := f.Write(append(b, '\n'))
		must(t, err)
	}
}

func TestListenAddrRefusesRemote(t *testing.T) {
	for _, a := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		if l, err := ListenAddr(a, false); !errors.Is(err, ErrRemote) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: %v, want ErrRemote", a, err)
		}
	}
	if _, err := ListenAddr("nonsense", false); !errors.Is(err, ErrOptions) {
		t.Errorf("bad address: %v", err)
	}
	for _, a := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "0"} {
		l, err := ListenAddr(a, false)
		if err != nil {
			if a == "[::1]:0" { // a machine without IPv6
				continue
			}
			t.Errorf("%s: %v", a, err)
			continue
		}
		l.Close()
	}
	l, err := ListenAddr("0.0.0.0:0", true)
	if err != nil {
		t.Fatalf("--allow-remote: %v", err)
	}
	l.Close()
}

// TestLiveServerFollowsRuns checks the server without a browser: the
// state and the report part follow metrics.jsonl and progress.json.
func TestLiveServerFollowsRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r1")
	liveRun(t, dir, 0.3, 2)
	l, err := NewLive([]string{dir}, LiveOptions{Poll: time.Hour})
	must(t, err)
	defer l.Close()
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		must(t, err)
		defer resp.Body.Close()
		var sb strings.Builder
		_, err = fmt.Fprint(&sb, readAll(t, resp))
		must(t, err)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, sb.String())
		}
		return sb.String()
	}
	st := l.State()
	if st.Version != 1 || len(st.Runs) != 1 || st.Runs[0].Steps != 2 || st.Runs[0].StepsTotal != 12 || st.Runs[0].Progress != nil {
		t.Fatalf("state %+v", st)
	}
	page := get("/")
	for _, want := range []string{`data-steps="2"`, `id="report"`, `src="/g/1/overview.svg"`, `data-points=`, "EventSource"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if svg := get("/g/1/curve-score_mean.svg"); !strings.Contains(svg, "<svg") {
		t.Errorf("picture: %.100s", svg)
	}
	l.refresh() // nothing changed: same version
	if v := l.State().Version; v != 1 {
		t.Fatalf("version %d after no change", v)
	}
	must(t, progress.WriteFile(dir, progress.Progress{Step: 3, Phase: progress.PhaseRollouts, EpisodesDone: 3, EpisodesTotal: 8, TokensPerS: 250, ETAStepS: 12, ETARunS: 400}))
	l.refresh()
	st = l.State()
	if st.Version != 1 || st.Runs[0].Progress == nil || st.Runs[0].Progress.Phase != "rollouts" ||
		!strings.Contains(st.Table, "3/8 episodes") || !strings.Contains(st.Table, `data-phase="rollouts"`) {
		t.Fatalf("after progress: %+v", st)
	}
	appendSteps(t, dir, 0.3, 3, 4)
	l.refresh()
	st = l.State()
	if st.Version != 2 || st.Runs[0].Steps != 4 || st.Runs[0].LastStep != 4 {
		t.Fatalf("after steps: %+v", st)
	}
	if r := get("/report"); !strings.Contains(r, `src="/g/2/overview.svg"`) {
		t.Error("report part not of version 2")
	}
	if _, err := os.Stat(filepath.Join(l.tmp, "1")); err != nil {
		t.Error("the previous version's pictures are gone already")
	}
	if resp, _ := http.Get(srv.URL + "/g/2/..%2fx"); resp != nil && resp.StatusCode == 200 {
		t.Error("path escape served")
	}
}

// A run not started yet is waited for; a file is not a run.
func TestLiveWaitsForARun(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	must(t, os.WriteFile(file, []byte("x"), 0o644))
	if _, err := NewLive([]string{file}, LiveOptions{}); !errors.Is(err, ErrNoRun) {
		t.Fatalf("a file: %v", err)
	}
	dir := filepath.Join(root, "later")
	l, err := NewLive([]string{dir}, LiveOptions{Poll: time.Hour})
	must(t, err)
	defer l.Close()
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	must(t, err)
	page := readAll(t, resp)
	resp.Body.Close()
	if st := l.State(); st.Runs[0].Waiting == "" || !strings.Contains(page, "waiting for the run to start") || !strings.Contains(page, "<title>") {
		t.Fatalf("state %+v\npage %s", st, page)
	}
	liveRun(t, dir, 0.3, 1)
	l.refresh()
	if st := l.State(); st.Version != 2 || st.Runs[0].Waiting != "" || st.Runs[0].Steps != 1 {
		t.Fatalf("after the first step: %+v", st)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String()
}

// TestLivePageInChromium loads the live page in headless Chromium, lets two
// runs grow (metrics lines appended as train appends them, progress.json
// replaced) and reads the page's DOM until the new steps show — without a
// reload. The screenshot is kept: $EMPO2_LIVE_SCREENSHOT if set, else the
// test's temporary folder (logged).
func TestLivePageInChromium(t *testing.T) {
	chromium := headless.ForTest(t)
	root := t.TempDir()
	r1, r2 := filepath.Join(root, "lr-0.3"), filepath.Join(root, "lr-0.1")
	liveRun(t, r1, 0.3, 3)
	liveRun(t, r2, 0.1, 2)
	must(t, progress.WriteFile(r1, progress.Progress{Step: 4, Phase: progress.PhaseRollouts, EpisodesDone: 2, EpisodesTotal: 8, TokensPerS: 231, ETAStepS: 20, ETARunS: 300}))

	l, err := NewLive([]string{r1, r2}, LiveOptions{Poll: 200 * time.Millisecond})
	must(t, err)
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	ln, err := ListenAddr("127.0.0.1:0", false)
	must(t, err)
	srv := &http.Server{Handler: l.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"

	logf, err := os.Create(filepath.Join(root, "chromium.log"))
	must(t, err)
	defer logf.Close()
	b, err := headless.Start(chromium, filepath.Join(root, "profile"), 1280, 1000, logf)
	must(t, err)
	defer b.Close()
	p, err := b.Open(url)
	must(t, err)

	type domState struct {
		Steps   map[string]string `json:"steps"`
		Phase   map[string]string `json:"phase"`
		Version string            `json:"version"`
		Points  string            `json:"points"`
		Final   []string          `json:"final"`
		Img     string            `json:"img"`
		ImgOK   bool              `json:"img_ok"`
		Marker  bool              `json:"marker"`
		Text    string            `json:"text"`
		Ready   string            `json:"ready"`
	}
	const read = `(() => {
	  const s = {steps: {}, phase: {}, final: []};
	  document.querySelectorAll("tr.live-run").forEach(r => { s.steps[r.dataset.run] = r.dataset.steps; s.phase[r.dataset.run] = r.dataset.phase || ""; });
	  s.version = document.getElementById("live") ? document.getElementById("live").dataset.version : "";
	  const f = document.getElementById("fig-curve-score_mean");
	  s.points = f ? f.dataset.points : "";
	  document.querySelectorAll("#final-figures tbody tr").forEach(r => s.final.push(r.cells[0].textContent + "=" + r.cells[3].textContent));
	  const img = document.querySelector("#fig-overview img");
	  s.img = img ? img.getAttribute("src") : "";
	  s.img_ok = !!(img && img.complete && img.naturalWidth > 0);
	  s.marker = window.__empo2Marker === 1;
	  s.text = document.getElementById("live-table").textContent.replace(/\s+/g, " ");
	  s.ready = document.readyState;
	  return s;
	})()`
	waitFor := func(what string, ok func(domState) bool) domState {
		t.Helper()
		var s domState
		deadline := time.Now().Add(90 * time.Second) // generous: make test loads both cores
		for {
			s = domState{}
			err := p.Eval(read, &s)
			if err == nil && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the page never showed it; last DOM state %+v (%v)", what, s, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The whole page must be parsed first: under load Chromium parses in
	// slices, and the overview's picture can be complete while the curve
	// figures below it are not in the DOM yet (a CI run read exactly that).
	s := waitFor("the first state", func(s domState) bool {
		return s.Ready == "complete" && s.Steps["lr-0.3"] == "3" && s.Steps["lr-0.1"] == "2" && s.ImgOK
	})
	if s.Phase["lr-0.3"] != "rollouts" || !strings.Contains(s.Text, "2/8 episodes") || s.Points != "5" || s.Version != "1" {
		t.Fatalf("first state %+v", s)
	}
	// Mark the page: a reload would lose the mark.
	must(t, p.Eval("window.__empo2Marker = 1", nil))

	// The runs grow: lr-0.3 finishes step 4 and goes on to step 5's update;
	// lr-0.1 finishes steps 3..5.
	appendSteps(t, r1, 0.3, 4, 4)
	must(t, progress.WriteFile(r1, progress.Progress{Step: 5, Phase: progress.PhaseUpdate, EpisodesDone: 8, EpisodesTotal: 8, TokensPerS: 236, ETAStepS: 4, ETARunS: 250}))
	time.Sleep(300 * time.Millisecond)
	appendSteps(t, r2, 0.1, 3, 5)
	s = waitFor("the new steps", func(s domState) bool {
		return s.Steps["lr-0.3"] == "4" && s.Steps["lr-0.1"] == "5" && s.Phase["lr-0.3"] == "update" && s.Points == "9" && s.ImgOK
	})
	if !s.Marker {
		t.Fatal("the page was reloaded")
	}
	if s.Version == "1" || !strings.HasPrefix(s.Img, "/g/"+s.Version+"/") {
		t.Fatalf("figures not swapped: %+v", s)
	}
	if !strings.Contains(strings.Join(s.Final, " "), "lr-0.1=5") || !strings.Contains(strings.Join(s.Final, " "), "lr-0.3=4") {
		t.Fatalf("final-figures table %v", s.Final)
	}
	t.Logf("DOM after the runs grew: %+v", s)

	// Scroll to the overview (the run table stays on top) and keep a screenshot.
	must(t, p.Eval(`document.getElementById("overview").scrollIntoView(); window.scrollBy(0, -document.getElementById("live").offsetHeight - 10); true`, nil))
	time.Sleep(300 * time.Millisecond)
	png, err := p.Screenshot()
	must(t, err)
	out := os.Getenv("EMPO2_LIVE_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "live.png")
	}
	must(t, os.WriteFile(out, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}
