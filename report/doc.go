// Package report turns EMPO² run directories into learning-curve figures
// (PNG and SVG, drawn with gonum.org/v1/plot) and one self-contained
// report.html; Live serves the same page for runs while they train
// (`empo2 report --serve`), redrawn as their files grow.
//
// It reads exactly the files `empo2 train` and `empo2 eval` write into a run
// directory, as package runfiles defines them (runfiles.Metrics lines,
// runfiles.EvalLine lines, runfiles.EvalReport and runfiles.OODReport
// objects; the contract tests round-trip each record through this
// package's reader, so renaming a drawn field fails a test):
//
//	config.yaml     the resolved run config; runs whose configs are equal once
//	                every `seed` key is removed form one group (mean ± min–max
//	                band over the seeds)
//	metrics.jsonl   one JSON object per training step: step, mode, score_mean,
//	                success_rate, reward_mean, loss, clip_frac, approx_kl,
//	                grad_norm, tips_retrieved_mean, t_rollout, … (any numeric
//	                field is read; missing or null fields are simply absent)
//	eval.jsonl      periodic evaluation: {"step":N,"memory_off":{…},"memory_on":{…}}
//	eval/*.json     `empo2 eval --json` results (same inner schema) and OOD
//	                adaptation results (score per trial index)
//
// The package is pure Go: no cgo, no model imports. Corrupt JSONL lines are
// errors naming the file and line (ErrCorrupt), except a truncated last line
// (no trailing newline, as a kill -9 mid-write leaves it), which is skipped
// with a warning. Missing files or fields skip the affected panel and say so
// in the HTML.
package report
