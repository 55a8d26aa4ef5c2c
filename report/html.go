package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"

	"github.com/empo2/empo2/internal/safefile"
)

// HTMLFile is the report page's name inside Options.Out.
const HTMLFile = "report.html"

// Generator is the mark of a page report writes (its generator meta tag):
// `empo2 report` replaces an existing report.html that carries it (a page
// it wrote before) without --force.
const Generator = `<meta name="generator" content="empo2 report" />`

type page struct {
	Title         string
	Window        int
	SmoothingNote string
	Embed         bool
	Groups        []pageGroup
	Metrics       []pageMetric
	Final         table
	Overview      *pageFigure
	Curves        []pageFigure
	ModeMix       *pageFigure
	ModeTable     *table
	Phases        *pageFigure
	PhaseTable    *table
	EvalCurves    []pageFigure
	EvalTable     *table
	EvalBars      []pageFigure
	EvalFileTable *table
	TaskTables    []table
	OODCurves     []pageFigure
	OODTable      *table
	Notes         map[string][]string // skipped panels by section
	Warnings      []string
}

type pageGroup struct {
	Label, Color, Runs, Seeds, Differs string
}

type pageMetric struct{ Key, Title, Desc string }

type pageFigure struct {
	Name, Title, Caption string
	Files                []string     // written files, relative to the page
	Src                  template.URL // what <img> shows: a file name or a data URI
	SrcFile              string       // the file behind Src
	Points               int          // data points drawn (learning curves; 0: not counted)
}

type table struct {
	ID, Caption string
	Head        []string
	Rows        [][]string
}

func hexColor(c color.NRGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// resolve picks each figure's <img> source: the PNG if written, else the SVG;
// embedded as a data URI when opt.Embed.
func (pg *page) resolve(dir string) error {
	fix := func(f *pageFigure) error {
		if f == nil || len(f.Files) == 0 {
			return nil
		}
		f.SrcFile = f.Files[0]
		for _, n := range f.Files {
			if filepath.Ext(n) == ".png" {
				f.SrcFile = n
			}
		}
		if !pg.Embed {
			f.Src = template.URL(f.SrcFile)
			return nil
		}
		b, err := os.ReadFile(filepath.Join(dir, f.SrcFile))
		if err != nil {
			return err
		}
		mime := "image/png"
		if filepath.Ext(f.SrcFile) == ".svg" {
			mime = "image/svg+xml"
		}
		f.Src = template.URL("data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b))
		return nil
	}
	for _, f := range []*pageFigure{pg.Overview, pg.ModeMix, pg.Phases} {
		if err := fix(f); err != nil {
			return err
		}
	}
	for _, fs := range [][]pageFigure{pg.Curves, pg.EvalCurves, pg.EvalBars, pg.OODCurves} {
		for i := range fs {
			if err := fix(&fs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeHTML(opt Options, pg *page) (string, error) {
	if err := pg.resolve(opt.Out); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, pg); err != nil {
		return "", fmt.Errorf("report.html: %w", err)
	}
	path := filepath.Join(opt.Out, HTMLFile)
	if err := safefile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	opt.logf("wrote %s", path)
	return path, nil
}

// The page is XHTML-compatible (every element closed) so tests can walk it
// with encoding/xml; it loads nothing from the network.
var pageTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<meta name="generator" content="empo2 report" />
<title>{{.Title}}</title>
{{template "style"}}
</head>
<body>
<h1>{{.Title}}</h1>
<nav><a href="#runs">Runs</a><a href="#legend">How to read</a><a href="#final">Final figures</a><a href="#overview">Overview</a><a href="#curves">Learning curves</a><a href="#modes">Mode mix</a><a href="#phases">Time per phase</a><a href="#periodic-eval">Periodic eval</a><a href="#eval">Eval results</a><a href="#ood">OOD adaptation</a><a href="#notes">Notes</a></nav>

<h2 id="runs">Runs and groups</h2>
<p>Runs whose config.yaml files are equal once seed keys are removed form one group, drawn as the mean over its runs with a min–max band.</p>
<table id="groups">
<caption>Groups</caption>
<thead><tr><th>group</th><th>colour</th><th>runs</th><th>seeds</th><th>config differences</th></tr></thead>
<tbody>
{{- range .Groups}}
<tr><td>{{.Label}}</td><td><span class="swatch" style="background: {{.Color}}"></span>{{.Color}}</td><td>{{.Runs}}</td><td>{{.Seeds}}</td><td>{{if .Differs}}{{.Differs}}{{else}}—{{end}}</td></tr>
{{- end}}
</tbody>
</table>

<h2 id="legend">How to read this report</h2>
<ul>
<li>x axis: the training step (metrics.jsonl's <code>step</code>); one colour per group (table above).</li>
<li>Bold line: {{if gt .Window 1}}the moving average over the last {{.Window}} steps (the mean over seeds for a group); faint line: the raw values{{else}}the raw values (no smoothing){{end}}.</li>
<li>Shaded band: min–max over the seeds of a group (only for groups of two or more runs).</li>
<li>Evaluation curves: solid = memory off (the policy alone), dashed = memory on (tips retrieved); OOD curves: solid = memory on, dashed = the no-memory control.</li>
<li>Each picture exists as PNG and/or SVG beside this page; the links under each figure open them.</li>
</ul>
<dl>
{{- range .Metrics}}
<dt>{{.Title}} (<code>{{.Key}}</code>)</dt><dd>{{.Desc}}</dd>
{{- end}}
</dl>

<h2 id="final">Final figures</h2>
{{template "table" .Final}}

<h2 id="overview">Overview</h2>
{{with .Overview}}{{template "figure" .}}{{end}}
{{- template "notes" (index .Notes "overview")}}

<h2 id="curves">Learning curves</h2>
<div class="grid">
{{- range .Curves}}{{template "figure" .}}{{end}}
</div>
{{- template "notes" (index .Notes "curves")}}

<h2 id="modes">Mode mix</h2>
{{with .ModeMix}}{{template "figure" .}}{{end}}
{{- with .ModeTable}}{{template "table" .}}{{end}}
{{- template "notes" (index .Notes "modes")}}

<h2 id="phases">Time per phase</h2>
{{with .Phases}}{{template "figure" .}}{{end}}
{{- with .PhaseTable}}{{template "table" .}}{{end}}
{{- template "notes" (index .Notes "phases")}}

<h2 id="periodic-eval">Periodic evaluation</h2>
{{range .EvalCurves}}{{template "figure" .}}{{end}}
{{- with .EvalTable}}{{template "table" .}}{{end}}
{{- template "notes" (index .Notes "periodic-eval")}}

<h2 id="eval">Evaluation results</h2>
{{range .EvalBars}}{{template "figure" .}}{{end}}
{{- with .EvalFileTable}}{{template "table" .}}{{end}}
{{- range .TaskTables}}
<details><summary>{{.Caption}}</summary>
{{template "table" .}}
</details>
{{- end}}
{{- template "notes" (index .Notes "eval")}}

<h2 id="ood">OOD adaptation</h2>
{{range .OODCurves}}{{template "figure" .}}{{end}}
{{- with .OODTable}}{{template "table" .}}{{end}}
{{- template "notes" (index .Notes "ood")}}

<h2 id="notes">Notes</h2>
{{- if .Warnings}}
<ul class="warnings">
{{- range .Warnings}}
<li class="warn">{{.}}</li>
{{- end}}
</ul>
{{- else}}
<p>No warnings while reading the runs.</p>
{{- end}}
</body>
</html>
{{define "style"}}<style>
body { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; margin: 2em auto; max-width: 1250px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.7em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.8em 0 1.5em; font-size: 0.9em; }
caption { text-align: left; font-weight: bold; padding-bottom: 0.3em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 0 1.5em; }
.grid figure { margin: 0.5em 0 1.5em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.swatch { display: inline-block; width: 1.6em; height: 0.7em; margin-right: 0.4em; vertical-align: middle; }
.note { color: #8a5a00; background: #fff8e6; padding: 0.3em 0.6em; border-left: 3px solid #e0a800; }
.warn { color: #a00; }
dt { font-weight: bold; }
dd { margin: 0 0 0.5em 1.5em; }
</style>{{end}}
{{define "figure"}}
<figure id="fig-{{.Name}}"{{if .Points}} data-points="{{.Points}}"{{end}}>
<img src="{{.Src}}" alt="{{.Title}}" />
<figcaption>{{.Caption}}{{range .Files}} <a href="{{.}}">{{.}}</a>{{end}}</figcaption>
</figure>
{{end}}
{{define "table"}}
<table id="{{.ID}}">
<caption>{{.Caption}}</caption>
<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table>
{{end}}
{{define "notes"}}{{range .}}
<p class="note">Not drawn: {{.}}</p>
{{- end}}{{end}}
`))
