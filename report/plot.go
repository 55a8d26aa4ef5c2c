package report

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/empo2/empo2/internal/safefile"
)

// palette: the "tab10" colours, distinguishable and colour-blind tolerable.
var palette = []color.NRGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

func paletteColor(i int) color.NRGBA { return palette[i%len(palette)] }

func withAlpha(c color.NRGBA, a uint8) color.NRGBA { c.A = a; return c }

var (
	sansFont   = font.Font{Typeface: "Liberation", Variant: "Sans"}
	titleFont  = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
	dashStyle  = []vg.Length{vg.Points(6), vg.Points(3)}
	boldWidth  = vg.Points(2)
	faintWidth = vg.Points(1)
)

// newPlot returns a plot with sans-serif text of readable sizes and a grid.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	setFont(&p.Title.TextStyle, 13)
	p.Title.TextStyle.Font.Weight = titleFont.Weight
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		setFont(&a.Label.TextStyle, 11)
		setFont(&a.Tick.Label, 9.5)
	}
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{225}
	g.Horizontal.Color = color.Gray{225}
	p.Add(g)
	return p
}

func setFont(s *text.Style, size float64) {
	s.Font = sansFont
	s.Font.Size = vg.Points(size)
}

// legend is a plot.Legend that counts its entries.
type legend struct {
	plot.Legend
	n int
}

func (l *legend) Add(name string, thumbs ...plot.Thumbnailer) {
	l.Legend.Add(name, thumbs...)
	l.n++
}

func newLegend() *legend {
	l := plot.NewLegend()
	setFont(&l.TextStyle, 10)
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(22)
	l.Padding = vg.Points(3)
	return &legend{Legend: l}
}

// curve is one line of a line chart.
type curve struct {
	Label  string
	Color  color.NRGBA
	Dashed bool
	Raw    plotter.XYs // drawn faint (nil = none)
	Line   plotter.XYs // drawn bold
	Lo, Hi []float64   // band around Line at the same x (nil = none)
	Points bool        // mark each point of Line (sparse data such as evals)
}

// lineChart is a chart of curves over a numeric x axis.
type lineChart struct {
	Title, XLabel, YLabel string
	Curves                []curve
	YMin, YMax            float64 // NaN = from the data
	IntegerX              bool    // x ticks at whole numbers only (steps, trial indices)
}

func (lc lineChart) plot() (*plot.Plot, *legend, error) {
	p := newPlot(lc.Title, lc.XLabel, lc.YLabel)
	leg := newLegend()
	for _, c := range lc.Curves {
		if len(c.Lo) > 1 && len(c.Lo) == len(c.Line) {
			poly := make(plotter.XYs, 0, 2*len(c.Line))
			for i := range c.Line {
				poly = append(poly, plotter.XY{X: c.Line[i].X, Y: c.Lo[i]})
			}
			for i := len(c.Line) - 1; i >= 0; i-- {
				poly = append(poly, plotter.XY{X: c.Line[i].X, Y: c.Hi[i]})
			}
			pg, err := plotter.NewPolygon(poly)
			if err != nil {
				return nil, leg, err
			}
			pg.Color = withAlpha(c.Color, 45)
			pg.LineStyle.Width = 0
			p.Add(pg)
		}
		if len(c.Raw) > 0 {
			l, err := plotter.NewLine(c.Raw)
			if err != nil {
				return nil, leg, err
			}
			l.Color = withAlpha(c.Color, 80)
			l.Width = faintWidth
			if c.Dashed {
				l.Dashes = dashStyle
			}
			p.Add(l)
		}
		if len(c.Line) == 0 {
			continue
		}
		l, err := plotter.NewLine(c.Line)
		if err != nil {
			return nil, leg, err
		}
		l.Color = c.Color
		l.Width = boldWidth
		if c.Dashed {
			l.Dashes = dashStyle
		}
		p.Add(l)
		thumbs := []plot.Thumbnailer{l}
		if c.Points || len(c.Line) == 1 {
			s, err := plotter.NewScatter(c.Line)
			if err != nil {
				return nil, leg, err
			}
			s.Color = c.Color
			s.Radius = vg.Points(2.5)
			s.Shape = draw.CircleGlyph{}
			p.Add(s)
			thumbs = append(thumbs, s)
		}
		leg.Add(c.Label, thumbs...)
	}
	// 4 % headroom so no curve runs along an axis line, unless the range is fixed.
	pad := (p.Y.Max - p.Y.Min) * 0.04
	p.Y.Min, p.Y.Max = p.Y.Min-pad, p.Y.Max+pad
	if !math.IsNaN(lc.YMin) {
		p.Y.Min = lc.YMin
	}
	if !math.IsNaN(lc.YMax) {
		p.Y.Max = lc.YMax
	}
	if p.Y.Min == p.Y.Max { // a constant series: give the axis some height
		p.Y.Min, p.Y.Max = p.Y.Min-1, p.Y.Max+1
	}
	if p.X.Min == p.X.Max {
		p.X.Min, p.X.Max = p.X.Min-1, p.X.Max+1
	}
	p.Y.Tick.Marker = niceTicks{trimTop: true}
	p.X.Tick.Marker = niceTicks{integer: lc.IntegerX}
	return p, leg, nil
}

// niceTicks labels 4–8 major ticks at 1, 2, 2.5 or 5 × 10^k steps (gonum's
// default labels only about three), with unlabelled minor ticks between.
type niceTicks struct {
	trimTop bool // leave the topmost tick unlabelled when it sits at the axis end (y axes)
	integer bool // whole-number steps only (training steps)
}

func (nt niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / 6
	if hi-lo <= 1e-9*math.Max(math.Abs(lo), math.Abs(hi)) || !(raw > 0) || math.IsInf(math.Log10(raw), 0) {
		// A flat curve whose values differ by rounding (the mean of equal
		// seeds), or a range too narrow for a decimal step: a step of about
		// (hi−lo)/6 would not move v (v+step = v), and the loop below would
		// never end. One labelled tick in the middle.
		mid := lo + (hi-lo)/2
		return []plot.Tick{{Value: mid, Label: strconv.FormatFloat(mid, 'g', 6, 64)}}
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	if nt.integer {
		if step == 2.5 {
			step = 2
		}
		step = math.Max(1, math.Round(step))
	}
	prec := max(0, -int(math.Floor(math.Log10(step)))+1)
	if step/math.Pow(10, math.Floor(math.Log10(step))) != 2.5 {
		prec = max(0, -int(math.Floor(math.Log10(step))))
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		label := strconv.FormatFloat(v, 'f', prec, 64)
		if nt.trimTop && hi-v < 0.12*step && v-lo > step {
			// A label at the very top would stick out above the axes and
			// push this panel's title above its neighbours' in a grid.
			label = ""
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
		if mv := v + step/2; mv < hi && (!nt.integer || step >= 2) {
			ts = append(ts, plot.Tick{Value: mv})
		}
	}
	if first := math.Ceil(lo/step)*step - step/2; first > lo && (!nt.integer || step >= 2) {
		ts = append(ts, plot.Tick{Value: first})
	}
	return ts
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// barSeries is one colour of a bar chart: one value per category (NaN = no bar).
type barSeries struct {
	Label  string
	Color  color.NRGBA
	Values []float64
}

// barChart draws grouped (side by side) or stacked bars over named categories.
type barChart struct {
	Title, YLabel string
	Cats          []string
	Series        []barSeries
	Stacked       bool
	YMax          float64 // NaN = from the data
	ValueFormat   string  // printf format of value labels above grouped bars ("" = none)
	Width         vg.Length
}

func (bc barChart) plot() (*plot.Plot, *legend, error) {
	p := newPlot(bc.Title, "", bc.YLabel)
	leg := newLegend()
	n := len(bc.Cats)
	avail := (bc.Width - vg.Points(230)) / vg.Length(max(n, 1))
	var prev *plotter.BarChart
	var stackedLeg []func()
	defer func() { // stacked: legend top-down in the order the bars stack bottom-up
		for i := len(stackedLeg) - 1; i >= 0; i-- {
			stackedLeg[i]()
		}
	}()
	for si, s := range bc.Series {
		if bc.Stacked {
			vals := make(plotter.Values, n)
			for i, v := range s.Values {
				if !math.IsNaN(v) {
					vals[i] = v
				}
			}
			b, err := plotter.NewBarChart(vals, min(vg.Points(60), avail*0.6))
			if err != nil {
				return nil, leg, err
			}
			b.Color = s.Color
			b.LineStyle.Width = 0
			if prev != nil {
				b.StackOn(prev)
			}
			prev = b
			p.Add(b)
			label := s.Label
			stackedLeg = append(stackedLeg, func() { leg.Add(label, b) })
			continue
		}
		w := min(vg.Points(40), avail*0.8/vg.Length(len(bc.Series)))
		off := (vg.Length(si) - vg.Length(len(bc.Series)-1)/2) * w
		var first *plotter.BarChart
		var labels plotter.XYLabels
		for i, v := range s.Values {
			if math.IsNaN(v) {
				continue
			}
			b, err := plotter.NewBarChart(plotter.Values{v}, w)
			if err != nil {
				return nil, leg, err
			}
			b.XMin = float64(i)
			b.Offset = off
			b.Color = s.Color
			b.LineStyle.Width = 0
			p.Add(b)
			if first == nil {
				first = b
			}
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: v})
			labels.Labels = append(labels.Labels, fmt.Sprintf(bc.ValueFormat, v))
		}
		if first != nil {
			leg.Add(s.Label, first)
		}
		if bc.ValueFormat != "" && len(labels.XYs) > 0 {
			lb, err := plotter.NewLabels(labels)
			if err != nil {
				return nil, leg, err
			}
			for i := range lb.TextStyle {
				setFont(&lb.TextStyle[i], 8.5)
				lb.TextStyle[i].XAlign = draw.XCenter
			}
			lb.Offset = vg.Point{X: off, Y: vg.Points(2)}
			p.Add(lb)
		}
	}
	p.Y.Tick.Marker = niceTicks{trimTop: true}
	p.NominalX(bc.Cats...)
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	if n > 3 {
		p.X.Tick.Label.Rotation = math.Pi / 9
		p.X.Tick.Label.XAlign = draw.XRight
	}
	if p.Y.Min > 0 {
		p.Y.Min = 0
	}
	if !math.IsNaN(bc.YMax) {
		p.Y.Max = bc.YMax
	} else if bc.ValueFormat != "" {
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.08 // room for the value labels
	} else {
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.04
	}
	if p.Y.Min == p.Y.Max {
		p.Y.Max = p.Y.Min + 1
	}
	return p, leg, nil
}

// figure is one picture: a grid of plots with one legend at the right.
type figure struct {
	Name    string // file stem
	Title   string
	Caption string
	Plots   [][]*plot.Plot
	Legend  *legend // nil = none
	W, H    vg.Length
}

// draw renders the figure on c: white background, the plots, the legend in a
// column at the right (outside the axes, so it never hides a curve).
func (f *figure) draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	area := c
	if f.Legend != nil && f.Legend.n > 0 {
		lw := f.Legend.Rectangle(c).Size().X + vg.Points(16)
		area = draw.Crop(c, 0, -lw, 0, 0)
		lc := draw.Crop(c, c.Size().X-lw+vg.Points(8), 0, 0, -vg.Points(30))
		f.Legend.Draw(lc)
	}
	if len(f.Plots) == 1 && len(f.Plots[0]) == 1 {
		f.Plots[0][0].Draw(area)
		return
	}
	rows, cols := len(f.Plots), len(f.Plots[0])
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(14), PadY: vg.Points(10),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(f.Plots, t, area)
	for i := range f.Plots {
		for j, p := range f.Plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
}

// pngSize is the pixel size of the figure's PNG at dpi.
func (f *figure) pngSize(dpi int) (w, h int) {
	return int(math.Ceil(float64(f.W/vg.Inch) * float64(dpi))), int(math.Ceil(float64(f.H/vg.Inch) * float64(dpi)))
}

// write renders the figure once per format into dir and returns the file names.
func (f *figure) write(dir string, formats []string, dpi int) ([]string, error) {
	var names []string
	for _, format := range formats {
		name := f.Name + "." + format
		var canvas vg.CanvasWriterTo
		switch format {
		case "png":
			img := vgimg.NewWith(vgimg.UseWH(f.W, f.H), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
			canvas = vgimg.PngCanvas{Canvas: img}
		case "svg":
			canvas = vgsvg.New(f.W, f.H)
		default:
			return nil, fmt.Errorf("%w: format %q", ErrOptions, format)
		}
		f.draw(draw.New(canvas))
		var wt io.WriterTo = canvas
		if format == "svg" {
			// Liberation Sans is metric-compatible with Arial/Helvetica: name
			// them as fallbacks so viewers without it keep the layout.
			var buf bytes.Buffer
			if _, err := canvas.WriteTo(&buf); err != nil {
				return nil, err
			}
			wt = bytes.NewBuffer(bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
				[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")))
		}
		if err := safefile.WriteFunc(filepath.Join(dir, name), 0o644, func(w io.Writer) error {
			_, err := wt.WriteTo(w)
			return err
		}); err != nil {
			return nil, fmt.Errorf("writing %s: %w", filepath.Join(dir, name), err)
		}
		names = append(names, name)
	}
	return names, nil
}
