package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

var update = flag.Bool("update", false, "regenerate testdata/report.golden and docs/img/report-example.png")

// TestReportRender renders the synthetic fixture and checks every picture:
// PNGs decode with the expected pixel size, SVGs parse as XML, every <img> of
// report.html points at a file that exists, nothing is loaded from the network.
func TestReportRender(t *testing.T) {
	root := t.TempDir()
	dirs := synthRuns(t, root, 60)
	out := filepath.Join(root, "report")
	res, err := Generate(dirs, Options{Out: out, Smooth: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"overview", "curve-score_mean", "curve-success_rate", "curve-reward_mean", "curve-loss",
		"curve-clip_frac", "curve-approx_kl", "curve-grad_norm", "curve-tips_retrieved_mean", "curve-t_step",
		"mode-mix", "time-per-phase", "eval-score", "eval-success", "evalfiles-score", "evalfiles-success",
		"ood-score", "ood-success"}
	for _, name := range want {
		for _, ext := range []string{".png", ".svg"} {
			if !slices.Contains(res.Files, name+ext) {
				t.Errorf("%s%s not written; files: %v", name, ext, res.Files)
			}
		}
	}
	for _, f := range res.Files {
		path := filepath.Join(out, f)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			w, h := int(math.Ceil(float64(figW/vg.Inch)*110)), int(math.Ceil(float64(figH/vg.Inch)*110))
			if strings.HasPrefix(f, "overview") {
				w, h = int(math.Ceil(float64(overviewW/vg.Inch)*110)), int(math.Ceil(float64(overviewH/vg.Inch)*110))
			}
			if got := img.Bounds().Size(); got != (image.Point{w, h}) {
				t.Errorf("%s: %v pixels, want %dx%d", f, got, w, h)
			}
			if !hasInk(img) {
				t.Errorf("%s: the picture is blank", f)
			}
		case ".svg":
			root, err := parseXML(b)
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", f, err)
			}
			if root != "svg" {
				t.Errorf("%s: root element %q, want svg", f, root)
			}
		}
	}
	html, err := os.ReadFile(res.HTML)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range attrValues(t, html, "img", "src") {
		if _, err := os.Stat(filepath.Join(out, ref)); err != nil {
			t.Errorf("report.html shows %q, which is not beside it: %v", ref, err)
		}
	}
	for _, attr := range [][2]string{{"img", "src"}, {"a", "href"}, {"link", "href"}, {"script", "src"}} {
		for _, v := range attrValues(t, html, attr[0], attr[1]) {
			if strings.Contains(v, "://") || strings.HasPrefix(v, "//") {
				t.Errorf("report.html loads %q from the network", v)
			}
		}
	}
	ids := map[string]bool{}
	for _, elem := range []string{"h1", "h2", "table", "figure", "section", "div"} {
		for _, id := range attrValues(t, html, elem, "id") {
			if ids[id] {
				t.Errorf("report.html: id %q used twice", id)
			}
			ids[id] = true
		}
	}
	// The truncated last line of grpo-s3 is a warning, not an error; the
	// stray eval/notes.json is skipped with a warning.
	for _, w := range []string{"metrics.jsonl:61: truncated last line skipped", "notes.json: unknown schema"} {
		if !slices.ContainsFunc(res.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
			t.Errorf("no warning %q in %q", w, res.Warnings)
		}
	}
}

// hasInk reports whether the image has both near-white and dark pixels.
func hasInk(img image.Image) bool {
	dark := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r+g+bl < 3*0x8000 {
				dark++
			}
		}
	}
	return dark > 50
}

func parseXML(b []byte) (root string, err error) {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return root, nil
		}
		if err != nil {
			return root, err
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
}

// htmlDecoder walks report.html with encoding/xml (the page is written with
// every element closed).
func htmlDecoder(b []byte) *xml.Decoder {
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	return d
}

func attrValues(t *testing.T, html []byte, elem, attr string) []string {
	t.Helper()
	var out []string
	d := htmlDecoder(html)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("report.html: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == elem {
			for _, a := range se.Attr {
				if a.Name.Local == attr {
					out = append(out, a.Value)
				}
			}
		}
	}
}

// skeleton reduces report.html to its structure, one line per element of
// interest: headings, figures with their image and links, tables (caption,
// header, every row), notes and warnings. Paths under tmp are replaced by $RUNS.
func skeleton(t *testing.T, html []byte, tmp string) string {
	t.Helper()
	var sb strings.Builder
	d := htmlDecoder(html)
	var stack []xml.StartElement
	var text strings.Builder
	var cells []string
	captureDepth := 0 // stack depth of the element whose text is captured (0 = none)
	attr := func(se xml.StartElement, name string) string {
		for _, a := range se.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("report.html: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tk)
			switch n := tk.Name.Local; {
			case n == "h1" || n == "h2" || n == "caption" || n == "th" || n == "td" || n == "dt" || n == "summary" ||
				(n == "p" && attr(tk, "class") == "note") || (n == "li" && attr(tk, "class") == "warn"):
				captureDepth = len(stack)
				text.Reset()
			case n == "figure":
				fmt.Fprintf(&sb, "figure#%s\n", attr(tk, "id"))
			case n == "img":
				fmt.Fprintf(&sb, "  img %s alt=%q\n", attr(tk, "src"), attr(tk, "alt"))
			case n == "a" && len(stack) > 1 && stack[len(stack)-2].Name.Local == "figcaption":
				fmt.Fprintf(&sb, "  link %s\n", attr(tk, "href"))
			case n == "table":
				fmt.Fprintf(&sb, "table#%s\n", attr(tk, "id"))
			case n == "tr":
				cells = nil
			}
		case xml.CharData:
			if captureDepth > 0 {
				text.Write(tk)
			}
		case xml.EndElement:
			if len(stack) == 0 {
				continue
			}
			se := stack[len(stack)-1]
			depth := len(stack)
			stack = stack[:len(stack)-1]
			if se.Name.Local == "tr" {
				fmt.Fprintf(&sb, "  | %s |\n", strings.Join(cells, " | "))
				continue
			}
			if depth != captureDepth {
				continue
			}
			captureDepth = 0
			s := strings.Join(strings.Fields(text.String()), " ")
			s = strings.ReplaceAll(s, tmp, "$RUNS")
			switch n := se.Name.Local; n {
			case "h1", "h2":
				fmt.Fprintf(&sb, "%s#%s: %s\n", n, attr(se, "id"), s)
			case "caption", "dt", "summary":
				fmt.Fprintf(&sb, "  %s: %s\n", n, s)
			case "p":
				fmt.Fprintf(&sb, "  note: %s\n", s)
			case "li":
				fmt.Fprintf(&sb, "  warning: %s\n", s)
			case "th", "td":
				cells = append(cells, s)
			}
		}
	}
	return sb.String()
}

// TestReportGolden compares report.html's structure (sections, figures and
// their files, tables with every cell, notes, warnings) with
// testdata/report.golden; `go test ./report -run TestReportGolden -update`
// regenerates it (and the README's example picture).
func TestReportGolden(t *testing.T) {
	root := t.TempDir()
	dirs := synthRuns(t, root, 60)
	// A run with only an eval file and no metrics: its panels degrade.
	evalOnly := filepath.Join(root, "eval-only")
	must(t, os.MkdirAll(filepath.Join(evalOnly, "eval"), 0o755))
	must(t, os.WriteFile(filepath.Join(evalOnly, "eval", "base.json"), []byte(`{"memory_off":{"score_mean":12.5,"success_rate":0.05,"episodes":20}}`), 0o644))
	dirs = append(dirs, evalOnly)
	out := filepath.Join(root, "report")
	res, err := Generate(dirs, Options{Out: out, Smooth: 5, Formats: []string{"png", "svg"}})
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(res.HTML)
	if err != nil {
		t.Fatal(err)
	}
	got := skeleton(t, html, root)
	golden := filepath.Join("testdata", "report.golden")
	if *update {
		must(t, os.MkdirAll("testdata", 0o755))
		must(t, os.WriteFile(golden, []byte(got), 0o644))
		writeExampleImage(t)
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("report.html structure differs from %s at line %d:\n got: %s\nwant: %s\n(run with -update if the change is intended)", golden, i+1, g, w)
			}
		}
	}
}

// writeExampleImage renders the README's example picture
// (docs/img/report-example.png): the overview of the synthetic fixture.
func writeExampleImage(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, preset := range []string{"empo2", "grpo"} {
		for seed := int64(1); seed <= 3; seed++ {
			dirs = append(dirs, writeSynthRun(t, root, synthRun{name: fmt.Sprintf("%s-s%d", preset, seed), preset: preset, seed: seed, steps: 80}))
		}
	}
	out := filepath.Join(root, "report")
	if _, err := Generate(dirs, Options{Out: out, Formats: []string{"png"}, DPI: 80}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "overview.png"))
	must(t, err)
	must(t, os.MkdirAll(filepath.Join("..", "docs", "img"), 0o755))
	must(t, os.WriteFile(filepath.Join("..", "docs", "img", "report-example.png"), b, 0o644))
	t.Logf("docs/img/report-example.png: %d bytes", len(b))
}

// TestReportEmbed: with Embed the page carries its pictures as data URIs.
func TestReportEmbed(t *testing.T) {
	root := t.TempDir()
	dirs := synthRuns(t, root, 12)[:1]
	res, err := Generate(dirs, Options{Out: filepath.Join(root, "r"), Formats: []string{"svg"}, Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(res.HTML)
	must(t, err)
	srcs := attrValues(t, html, "img", "src")
	if len(srcs) == 0 {
		t.Fatal("no images")
	}
	for _, s := range srcs {
		if !strings.HasPrefix(s, "data:image/svg+xml;base64,") {
			t.Errorf("img src %.60q is not an embedded SVG", s)
		}
	}
}

func TestReadJSONLErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	cases := []struct {
		name, body string
		err        string // "" = ok
		rows, warn int
	}{
		{"ok", "{\"step\":1}\n\n{\"step\":2}\n", "", 2, 0},
		{"truncated last line", "{\"step\":1}\n{\"step\":2}\n{\"step\":3,\"lo", "", 2, 1},
		{"corrupt middle line", "{\"step\":1}\n{\"step\":2,\n{\"step\":3}\n", "metrics.jsonl:2:", 0, 0},
		{"corrupt last line with newline", "{\"step\":1}\n{\"step\n", "metrics.jsonl:2:", 0, 0},
		{"not an object", "{\"step\":1}\n[1,2]\n", "metrics.jsonl:2:", 0, 0},
		{"two objects on a line", "{\"step\":1}{\"step\":2}\n", "metrics.jsonl:1: extra data", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must(t, os.WriteFile(path, []byte(c.body), 0o644))
			var warns []string
			lines, err := readJSONL(path, &warns)
			if c.err != "" {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want ErrCorrupt naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) != c.rows || len(warns) != c.warn {
				t.Fatalf("%d rows, %d warnings %q; want %d, %d", len(lines), len(warns), warns, c.rows, c.warn)
			}
		})
	}
}

func TestLoadRunErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadRun(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoRun) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := LoadRun(dir); !errors.Is(err, ErrNoRun) {
		t.Errorf("empty dir: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("a: [1, 2\n"), 0o644))
	if _, err := LoadRun(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "config.yaml") {
		t.Errorf("bad yaml: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("a: 1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{\"step\":\"x\"}\n"), 0o644))
	if _, err := LoadRun(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "metrics.jsonl:1") {
		t.Errorf("non-numeric step: %v", err)
	}
	// Repeated steps (a resumed run): the later line wins, with a warning.
	must(t, os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":2}\n{\"step\":2,\"loss\":3}\n"), 0o644))
	r, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ys := r.Series("loss"); !slices.Equal(ys, []float64{1, 3}) || len(r.Warnings) != 1 {
		t.Errorf("loss = %v, warnings %q", ys, r.Warnings)
	}
	// eval.jsonl without a step is an error naming the line.
	must(t, os.WriteFile(filepath.Join(dir, "eval.jsonl"), []byte("{\"step\":1,\"memory_off\":{\"score_mean\":1}}\n{\"memory_on\":{}}\n"), 0o644))
	if _, err := LoadRun(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "eval.jsonl:2") {
		t.Errorf("eval line without step: %v", err)
	}
}

func TestGroupRuns(t *testing.T) {
	mk := func(name, cfg string) *Run {
		r := &Run{Name: name}
		must(t, r.parseConfig(name+"/config.yaml", []byte(cfg)))
		return r
	}
	runs := []*Run{
		mk("a-s1", "seed: 1\nlr: 0.1\nrollout: {seed: 1, t: 1}\n"),
		mk("b", "seed: 2\nlr: 0.2\nrollout: {seed: 2, t: 1}\n"),
		mk("a-s2", "seed: 2\nlr: 0.1\nsteps: 30\nthreads: 4\nlogging: {tensorboard: false}\nrollout: {seed: 9, t: 1}\n"), // longer run, other threads, no event files: same experiment
		{Name: "noconfig"},
	}
	gs := GroupRuns(runs)
	if len(gs) != 3 {
		t.Fatalf("%d groups, want 3", len(gs))
	}
	if gs[0].Label != "a (2 seeds)" || len(gs[0].Runs) != 2 || gs[0].Runs[1].Name != "a-s2" {
		t.Errorf("group 0 = %q %v", gs[0].Label, runNames(gs[0].Runs))
	}
	if gs[0].Seeds() != "1, 2" {
		t.Errorf("seeds %q", gs[0].Seeds())
	}
	if !slices.Equal(gs[0].Differs, []string{"lr=0.1"}) || !slices.Equal(gs[1].Differs, []string{"lr=0.2"}) {
		t.Errorf("differs %q / %q", gs[0].Differs, gs[1].Differs)
	}
	if gs[2].Label != "noconfig" {
		t.Errorf("group 2 = %q", gs[2].Label)
	}
}

func TestSmoothAggregate(t *testing.T) {
	if got := smooth([]float64{1, 2, 3, 4}, 2); !slices.Equal(got, []float64{1, 1.5, 2.5, 3.5}) {
		t.Errorf("smooth = %v", got)
	}
	if got := smooth([]float64{1, 5}, 1); !slices.Equal(got, []float64{1, 5}) {
		t.Errorf("smooth w=1 = %v", got)
	}
	b := aggregate([][]float64{{1, 2, 3}, {2, 3}}, [][]float64{{10, 20, 30}, {40, 0}})
	if !slices.Equal(b.X, []float64{1, 2, 3}) || !slices.Equal(b.Mean, []float64{10, 30, 15}) ||
		!slices.Equal(b.Lo, []float64{10, 20, 0}) || !slices.Equal(b.Hi, []float64{10, 40, 30}) || !slices.Equal(b.N, []int{1, 2, 2}) {
		t.Errorf("aggregate = %+v", b)
	}
}

func TestParseOOD(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"arrays":  `{"ood":true,"memory_on":{"score_per_trial":[1,2,3]},"memory_off":{"score_per_trial":[1,1,1],"success_per_trial":[0,0,0.5]}}`,
		"objects": `{"trials":[{"trial":2,"score_mean":2,"success_rate":0},{"trial":1,"score_mean":1,"success_rate":0},{"trial":3,"score_mean":3,"success_rate":1}]}`,
	} {
		path := filepath.Join(dir, name+".json")
		must(t, os.WriteFile(path, []byte(body), 0o644))
		r := &Run{}
		r.loadEvalFile(path)
		if len(r.EvalFiles) != 1 || r.EvalFiles[0].OOD == nil {
			t.Fatalf("%s: not read as OOD (warnings %q)", name, r.Warnings)
		}
		o := r.EvalFiles[0].OOD
		if !slices.Equal(o.Score[true], []float64{1, 2, 3}) || o.Trials() != 3 {
			t.Errorf("%s: memory-on scores %v", name, o.Score[true])
		}
		if name == "arrays" && !slices.Equal(o.Success[false], []float64{0, 0, 0.5}) {
			t.Errorf("%s: control success %v", name, o.Success[false])
		}
		if name == "objects" && !slices.Equal(o.Success[true], []float64{0, 0, 1}) {
			t.Errorf("%s: success %v", name, o.Success[true])
		}
	}
	path := filepath.Join(dir, "bad.json")
	must(t, os.WriteFile(path, []byte(`{"ood":{"memory_on":{"note":"x"}}}`), 0o644))
	r := &Run{}
	r.loadEvalFile(path)
	if len(r.EvalFiles) != 0 || len(r.Warnings) != 1 {
		t.Errorf("OOD file without trials: files %v, warnings %q", r.EvalFiles, r.Warnings)
	}
}

func TestOptionsErrors(t *testing.T) {
	root := t.TempDir()
	dirs := synthRuns(t, root, 3)[:1]
	for _, o := range []Options{{}, {Out: root, Formats: []string{"gif"}}, {Out: root, Smooth: -1}, {Out: root, DPI: 5}} {
		if _, err := Generate(dirs, o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: err = %v, want ErrOptions", o, err)
		}
	}
	if _, err := Generate(nil, Options{Out: root}); !errors.Is(err, ErrOptions) {
		t.Errorf("no runs: %v", err)
	}
}

// TestReportDegrades: a run with only a score curve still renders; every
// panel it lacks is named in the page as not drawn.
func TestReportDegrades(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "bare")
	must(t, os.MkdirAll(run, 0o755))
	must(t, os.WriteFile(filepath.Join(run, "metrics.jsonl"), []byte("{\"step\":1,\"score_mean\":3}\n{\"step\":2,\"score_mean\":5,\"loss\":null}\n"), 0o644))
	res, err := Generate([]string{run}, Options{Out: filepath.Join(dir, "out"), Formats: []string{"svg"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Files, "curve-score_mean.svg") || slices.Contains(res.Files, "curve-loss.svg") {
		t.Errorf("files %v", res.Files)
	}
	html, err := os.ReadFile(res.HTML)
	must(t, err)
	for _, want := range []string{"Not drawn: Loss (loss): no run has this field", "Not drawn: mode mix", "Not drawn: time per phase",
		"Not drawn: periodic evaluation", "Not drawn: evaluation results", "Not drawn: OOD adaptation", "bare: no config.yaml"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}

// TestReportShortRuns: runs of one and three steps (e.g. `train --steps 3`)
// render: single points are drawn as markers, degenerate axes get a range.
func TestReportShortRuns(t *testing.T) {
	for _, steps := range []int{1, 3} {
		root := t.TempDir()
		dir := writeSynthRun(t, root, synthRun{name: "r", preset: "empo2", seed: 1, steps: steps, evalEvery: 1})
		res, err := Generate([]string{dir}, Options{Out: filepath.Join(root, "out"), Formats: []string{"png"}})
		if err != nil {
			t.Fatalf("%d steps: %v", steps, err)
		}
		b, err := os.ReadFile(filepath.Join(root, "out", "curve-score_mean.png"))
		must(t, err)
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || !hasInk(img) {
			t.Fatalf("%d steps: curve-score_mean.png: %v", steps, err)
		}
		if len(res.Files) < 10 {
			t.Errorf("%d steps: only %v", steps, res.Files)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	labels := func(nt niceTicks, lo, hi float64) []string {
		var out []string
		for _, tk := range nt.Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	for _, c := range []struct {
		nt     niceTicks
		lo, hi float64
		want   []string
	}{
		{niceTicks{}, 0, 1, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{niceTicks{trimTop: true}, 0, 1, []string{"0.0", "0.2", "0.4", "0.6", "0.8"}},
		{niceTicks{}, 0.005, 0.015, []string{"0.006", "0.008", "0.010", "0.012", "0.014"}},
		{niceTicks{}, 0.005, 0.02, []string{"0.0050", "0.0075", "0.0100", "0.0125", "0.0150", "0.0175", "0.0200"}},
		{niceTicks{integer: true}, 1, 3, []string{"1", "2", "3"}},
		{niceTicks{integer: true}, 1, 15, []string{"2", "4", "6", "8", "10", "12", "14"}},
		{niceTicks{integer: true}, 1, 60, []string{"10", "20", "30", "40", "50", "60"}},
		// the mean of three seeds' 0.1 is 0.1 + 1 ulp: the loop used to never
		// end (22 GB and minutes for `report` of three equal runs)
		{niceTicks{}, 0.1, math.Nextafter(0.1, 1), []string{"0.1"}},
		{niceTicks{trimTop: true}, 30, math.Nextafter(30, 31), []string{"30"}},
		// (hi−lo)/6 underflows to 0: no decimal step at all
		{niceTicks{}, 0, 5e-324, []string{"0"}},
	} {
		if got := labels(c.nt, c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("%+v [%g, %g]: %q, want %q", c.nt, c.lo, c.hi, got, c.want)
		}
	}
}
