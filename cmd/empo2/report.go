package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/report"
)

var (
	reportOutFlag    = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "output `DIR` for report.html and the pictures (created; required unless --serve)"}
	reportSmoothFlag = &cli.IntFlag{Name: "smooth", Usage: "moving-average window `W` in steps (0 = auto: steps/10, 1..50; 1 = no smoothing)"}
	reportFormatFlag = &cli.StringFlag{Name: "format", Usage: "picture formats, comma-separated: png, svg", Value: "png,svg"}
	reportDPIFlag    = &cli.IntFlag{Name: "dpi", Usage: "PNG resolution", Value: 110}
	reportEmbedFlag  = &cli.BoolFlag{Name: "embed", Usage: "embed the pictures in report.html as data URIs (one file to share)"}
	reportTitleFlag  = &cli.StringFlag{Name: "title", Usage: "page title", Value: "EMPO² training report"}
	reportServeFlag  = &cli.StringFlag{Name: "serve", Usage: "serve a live page of the runs at `ADDR` (HOST:PORT or a port on 127.0.0.1) that follows them as they run, instead of writing --out"}
	reportPollFlag   = &cli.DurationFlag{Name: "poll", Usage: "with --serve: how often the runs' files are looked at", Value: time.Second}
	reportRemoteFlag = &cli.BoolFlag{Name: "allow-remote", Usage: "let --serve listen on an address other machines can reach (without it: loopback only)"}
)

func init() {
	register(&cli.Command{
		Name:      "report",
		Usage:     "draw learning curves and eval results of run directories into PNG/SVG pictures and report.html",
		ArgsUsage: "RUN [RUN…]",
		Description: "Reads each run directory's config.yaml, metrics.jsonl, eval.jsonl and eval/*.json\n" +
			"(written by `empo2 train` and `empo2 eval --json`). Runs whose configs are equal once\n" +
			"the seed is removed are drawn as one curve: the mean over seeds with a min–max band.\n" +
			"report.html loads nothing from the network (pictures beside it, or --embed). See docs/report.md.\n" +
			"Examples:\n" +
			"  empo2 report r --out report\n" +
			"  empo2 report runs/empo2-s1 runs/empo2-s2 runs/grpo-s1 runs/grpo-s2 --out cmp --smooth 10 --format png\n" +
			"  empo2 report --serve 127.0.0.1:8080 runs/empo2-s1 runs/grpo-s1   # a live page while they train",
		Flags:  []cli.Flag{reportOutFlag, reportSmoothFlag, reportFormatFlag, reportDPIFlag, reportEmbedFlag, reportTitleFlag, forceFlag, reportServeFlag, reportPollFlag, reportRemoteFlag},
		Action: reportAction,
	})
}

// writtenByReport reports whether the file at p is a page report wrote
// (report.Generator in its head).
func writtenByReport(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	return strings.Contains(string(head[:n]), report.Generator)
}

func reportAction(c *cli.Context) error {
	if c.NArg() == 0 {
		return fmt.Errorf("report: give at least one run directory (usage: empo2 report RUN [RUN…] --out DIR)")
	}
	if c.IsSet(reportServeFlag.Name) {
		if c.IsSet(reportOutFlag.Name) {
			return fmt.Errorf("report: --serve and --out: a live page or files, not both")
		}
		return reportServe(c)
	}
	if !c.IsSet(reportOutFlag.Name) {
		return fmt.Errorf("report: --out DIR is required (or --serve ADDR for a live page)")
	}
	var runs []safefile.Path
	for _, r := range c.Args().Slice() {
		runs = append(runs, safefile.Path{Flag: "RUN", Path: r, Dir: true})
	}
	out := safefile.Path{Flag: "--out", Path: c.String(reportOutFlag.Name), Dir: true, Files: []string{report.HTMLFile}}
	if err := safefile.CheckOutputs([]safefile.Path{out}, runs); err != nil {
		return err
	}
	// a report.html that report wrote (its generator mark) is replaced;
	// anything else only with --force
	if !writtenByReport(filepath.Join(out.Path, report.HTMLFile)) {
		if err := checkNew(c, out); err != nil {
			return err
		}
	}
	opt := report.Options{
		Out:     c.String(reportOutFlag.Name),
		Smooth:  c.Int(reportSmoothFlag.Name),
		Formats: strings.Split(c.String(reportFormatFlag.Name), ","),
		DPI:     c.Int(reportDPIFlag.Name),
		Embed:   c.Bool(reportEmbedFlag.Name),
		Title:   c.String(reportTitleFlag.Name),
		Logf:    func(format string, args ...any) { log.Debug().Msgf(format, args...) },
	}
	ctx, sig := interruptible(c)
	defer sig.stop()
	opt.Context = ctx
	// A progress bar over the pictures on a terminal (a report of many long
	// runs takes seconds); nothing otherwise.
	var bar *progressbar.ProgressBar
	drawn, pictures := 0, 0
	opt.Progress = func(done, total int) {
		if drawn == 0 {
			log.Info().Int("pictures", total).Str("out", opt.Out).Msg("report: drawing")
		}
		drawn, pictures = done, total
		if term.IsTerminal(int(os.Stderr.Fd())) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("drawing"),
					progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
			}
			_ = bar.Set(done)
		}
	}
	res, err := report.Generate(c.Args().Slice(), opt)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		if sig.caught() {
			return sig.interrupted(fmt.Sprintf("report interrupted after %d of %d pictures (each complete); report.html not written", drawn, pictures))
		}
		return err
	}
	for _, w := range res.Warnings {
		log.Warn().Msg(w)
	}
	for _, s := range res.Skipped {
		log.Debug().Msgf("not drawn: %s", s)
	}
	abs, _ := filepath.Abs(res.HTML)
	fmt.Fprintf(c.App.Writer, "wrote %s (%d pictures in %s)\n", abs, len(res.Files), filepath.Dir(abs))
	return nil
}

// reportServe serves the live page (report.Live) until interrupted.
func reportServe(c *cli.Context) error {
	ln, err := report.ListenAddr(c.String(reportServeFlag.Name), c.Bool(reportRemoteFlag.Name))
	if err != nil {
		return err
	}
	defer ln.Close()
	live, err := report.NewLive(c.Args().Slice(), report.LiveOptions{
		Smooth: c.Int(reportSmoothFlag.Name),
		Title:  c.String(reportTitleFlag.Name),
		Poll:   c.Duration(reportPollFlag.Name),
		Logf:   func(format string, args ...any) { log.Debug().Msgf(format, args...) },
	})
	if err != nil {
		return err
	}
	defer live.Close()
	ctx, sig := interruptible(c)
	defer sig.stop()
	go live.Run(ctx)
	srv := &http.Server{Handler: live.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(c.App.Writer, "serving the live report of %d run(s) at http://%s/ (Ctrl-C stops)\n", c.NArg(), ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if sig.caught() {
		return sig.interrupted("live report stopped")
	}
	return nil
}
