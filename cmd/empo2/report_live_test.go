package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/empo2/empo2/internal/headless"
	"github.com/empo2/empo2/internal/progress"
)

// TestReportServeRefusesRemote: --serve listens on loopback unless
// --allow-remote; --serve and --out exclude each other.
func TestReportServeRefusesRemote(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, err := runCLI(t, "report", "--serve", "0.0.0.0:0", dir); err == nil || !strings.Contains(stderr, "--allow-remote") {
		t.Fatalf("0.0.0.0: %v %s", err, stderr)
	}
	if _, stderr, err := runCLI(t, "report", "--serve", "127.0.0.1:0", "--out", filepath.Join(dir, "o"), dir); err == nil || !strings.Contains(stderr, "not both") {
		t.Fatalf("--serve with --out: %v %s", err, stderr)
	}
	if _, stderr, err := runCLI(t, "report", dir); err == nil || !strings.Contains(stderr, "--out") {
		t.Fatalf("no --out: %v %s", err, stderr)
	}
}

// TestReportServeFollowsTrain: `empo2 report --serve` started before the
// run exists, headless Chromium on its page, then a real `empo2 train`:
// the page (never reloaded) shows the steps as train finishes them and the
// step in progress with its phase from progress.json. The screenshot is
// kept at $EMPO2_LIVE_SCREENSHOT if set (docs/img/live-report.png is made
// so), else in the test's temporary folder.
func TestReportServeFollowsTrain(t *testing.T) {
	chromium := headless.ForTest(t)
	const steps = 10
	model := trainModel(t)
	root := t.TempDir()
	run := filepath.Join(root, "run")

	srv := exec.Command(binPath, "report", "--serve", "127.0.0.1:0", "--poll", "100ms", run)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	}()
	urlRe := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	sc := bufio.NewScanner(stdout)
	var url string
	for url == "" && sc.Scan() {
		url = urlRe.FindString(sc.Text())
	}
	if url == "" {
		t.Fatal("report --serve printed no address")
	}
	go func() { // drain
		for sc.Scan() {
		}
	}()

	logf, err := os.Create(filepath.Join(root, "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	b, err := headless.Start(chromium, filepath.Join(root, "profile"), 1280, 900, logf)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := b.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	type dom struct {
		Rows    int    `json:"rows"`
		Steps   string `json:"steps"`
		Phase   string `json:"phase"`
		Text    string `json:"text"`
		Version string `json:"version"`
		Points  string `json:"points"`
		Marker  bool   `json:"marker"`
	}
	const read = `(() => {
	  const r = document.querySelector("tr.live-run");
	  const f = document.getElementById("fig-curve-score_mean");
	  return {rows: document.querySelectorAll("tr.live-run").length, steps: r ? (r.dataset.steps || "") : "",
	    phase: r ? (r.dataset.phase || "") : "", text: r ? r.textContent.replace(/\s+/g, " ") : "",
	    version: document.getElementById("live") ? document.getElementById("live").dataset.version : "", points: f ? (f.dataset.points || "") : "",
	    marker: window.__empo2Marker === 1};
	})()`
	get := func() dom {
		var d dom
		if err := p.Eval(read, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	deadline := time.Now().Add(90 * time.Second) // generous: make test loads both cores
	for d := get(); d.Rows != 1 || !strings.Contains(d.Text, "waiting"); d = get() {
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the run as waiting: %+v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.Eval("window.__empo2Marker = 1", nil); err != nil {
		t.Fatal(err)
	}

	// Longer episodes than the quick runs' so that a step outlasts a redraw
	// of the pictures, and the page can show each step.
	tr := exec.Command(binPath, trainArgs(model, run, "--steps", strconv.Itoa(steps), "--set", "rollout.step_limit=8", "--set", "rollout.max_action_tokens=16")...)
	var trainOut strings.Builder
	tr.Stdout, tr.Stderr = &trainOut, &trainOut
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Wait() }()
	seenSteps, seenPhases := map[string]bool{}, map[string]bool{}
	var last dom
	var png []byte // taken mid-run: steps done and a step in progress
	shoot := func() {
		if err := p.Eval(`document.getElementById("overview").scrollIntoView(); window.scrollBy(0, -document.getElementById("live").offsetHeight - 10); true`, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if png, err = p.Screenshot(); err != nil {
			t.Fatal(err)
		}
	}
	finished := false
	deadline = time.Now().Add(8 * time.Minute)
	for {
		last = get()
		seenSteps[last.Steps] = true
		if last.Phase != "" {
			seenPhases[last.Phase] = true
		}
		if n, _ := strconv.Atoi(last.Steps); png == nil && n >= 2 && last.Phase != "" && last.Phase != progress.PhaseDone {
			shoot()
		}
		if finished && last.Steps == strconv.Itoa(steps) && last.Points == strconv.Itoa(steps) {
			break
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("train: %v\n%s", err, trainOut.String())
			}
			finished, deadline = true, time.Now().Add(90*time.Second)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not follow the run: last DOM %+v; steps seen %v\ntrain: %s", last, seenSteps, trainOut.String())
		}
		time.Sleep(150 * time.Millisecond)
	}
	if !last.Marker {
		t.Fatal("the page was reloaded")
	}
	grew := 0
	for s := 1; s <= steps; s++ {
		if seenSteps[strconv.Itoa(s)] {
			grew++
		}
	}
	if grew < 3 {
		t.Fatalf("the page showed only %v steps done while the run went: not live", seenSteps)
	}
	var phases []string
	for ph := range seenPhases {
		phases = append(phases, ph)
	}
	if _, err := progress.ReadFile(run); err == nil && len(phases) == 0 {
		t.Fatal("train wrote progress.json but the page never showed a phase")
	}
	t.Logf("steps done seen: %v; phases seen: %v; last row: %s", seenSteps, phases, last.Text)

	if png == nil {
		shoot()
	}
	out := os.Getenv("EMPO2_LIVE_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "live.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
}
