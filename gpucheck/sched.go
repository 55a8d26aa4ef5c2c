package gpucheck

import (
	"encoding/json"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

// The scheduler's own account of a graph: with GGML_SCHED_DEBUG=2 in the
// environment when a ggml_backend_sched is created, every graph it splits is
// dumped through ggml's log (ggml-backend.cpp,
// ggml_backend_sched_print_assignments): one "## SPLIT #i: BACKEND # n inputs"
// line per split, then one line per node,
//
//	node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s] use=%d: <sources>
//
// with the op, the tensor name, its size, the backend that runs it and why
// it was put there. The llama package routes ggml's log into zerolog (as
// trace-level lines), where a capture reads it back.

const schedDebugEnv = "GGML_SCHED_DEBUG"

// SchedSplit is one split of a scheduled graph.
type SchedSplit struct {
	Backend string `json:"backend"`
	Inputs  int    `json:"inputs"` // tensors copied in from other backends
	Nodes   int    `json:"nodes"`  // non-view nodes
}

// OpCount is how many nodes of one op ran on a backend.
type OpCount struct {
	Op    string `json:"op"` // as ggml prints it: at most 10 characters
	Count int    `json:"count"`
}

// SchedReport summarises the last graph dump of a captured call.
type SchedReport struct {
	Dumps          int            `json:"dumps"`  // graph dumps seen during the call
	NSplits        int            `json:"splits"` // splits of the last one
	Splits         []SchedSplit   `json:"split_list,omitempty"`
	NodesByBackend map[string]int `json:"nodes_by_backend"`
	// CPUOps: the ops of the nodes the CPU ran although the primary backend
	// is another device (ops the device lacks, or placed there by the
	// scheduler's rules), most frequent first. Empty when the primary is
	// the CPU itself.
	CPUOps    []OpCount `json:"cpu_ops"`
	Unparsed  int       `json:"unparsed_lines,omitempty"` // node lines that did not match the format
	Truncated bool      `json:"split_list_truncated,omitempty"`
}

// maxSplitList caps SchedReport.Splits (a graph that bounces between
// backends can have hundreds of splits; NSplits keeps the count).
const maxSplitList = 64

var (
	splitLine = regexp.MustCompile(`^## SPLIT #(\d+): (\S+) # (\d+) inputs`)
	nodeLine  = regexp.MustCompile(`^node #\s*\d+ \(`)
)

// parseSchedDump reads the assignment dumps among log lines and reports the
// last one; primary is the name of the backend that should run the graph
// ("CPU" when there is no device).
func parseSchedDump(lines []string, primary string) SchedReport {
	var rep SchedReport
	var cur []SchedSplit
	byBackend := map[string]int{}
	cpuOps := map[string]int{}
	reset := func() {
		cur = nil
		byBackend = map[string]int{}
		cpuOps = map[string]int{}
		rep.Unparsed = 0
	}
	for _, l := range lines {
		if m := splitLine.FindStringSubmatch(l); m != nil {
			if m[1] == "0" {
				rep.Dumps++
				reset()
			}
			n, _ := strconv.Atoi(m[3])
			cur = append(cur, SchedSplit{Backend: m[2], Inputs: n})
			continue
		}
		loc := nodeLine.FindStringIndex(l)
		if loc == nil || len(cur) == 0 {
			continue
		}
		// fixed-width fields after "node #N (": op[10] "): " name[20] " (" size[5] ") [" backend[5]
		rest := l[loc[1]:]
		if len(rest) < 48 || rest[10:13] != "): " || rest[33:35] != " (" || rest[40:43] != ") [" {
			rep.Unparsed++
			continue
		}
		op := strings.TrimSpace(rest[0:10])
		backend := strings.TrimSpace(rest[43:48])
		cur[len(cur)-1].Nodes++
		byBackend[backend]++
		if !strings.EqualFold(backend, primary) && strings.EqualFold(backend, "CPU") {
			cpuOps[op]++
		}
	}
	rep.NSplits = len(cur)
	rep.Splits = cur
	if len(rep.Splits) > maxSplitList {
		rep.Splits, rep.Truncated = rep.Splits[:maxSplitList], true
	}
	rep.NodesByBackend = byBackend
	rep.CPUOps = []OpCount{}
	for op, n := range cpuOps {
		rep.CPUOps = append(rep.CPUOps, OpCount{op, n})
	}
	sort.Slice(rep.CPUOps, func(i, j int) bool {
		if rep.CPUOps[i].Count != rep.CPUOps[j].Count {
			return rep.CPUOps[i].Count > rep.CPUOps[j].Count
		}
		return rep.CPUOps[i].Op < rep.CPUOps[j].Op
	})
	return rep
}

// schedDebug sets GGML_SCHED_DEBUG=2 for the schedulers created until the
// returned function restores the environment.
func schedDebug() (restore func()) {
	old, had := os.LookupEnv(schedDebugEnv)
	os.Setenv(schedDebugEnv, "2")
	return func() {
		if had {
			os.Setenv(schedDebugEnv, old)
		} else {
			os.Unsetenv(schedDebugEnv)
		}
	}
}

// logCapture collects the messages of llama.cpp/ggml log lines.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) Write(p []byte) (int, error) {
	var e struct {
		Src string `json:"src"`
		Msg string `json:"message"`
	}
	if json.Unmarshal(p, &e) == nil && e.Src == "llama.cpp" {
		c.mu.Lock()
		c.lines = append(c.lines, e.Msg)
		c.mu.Unlock()
	}
	return len(p), nil
}

// captureLog runs f with every log line of the process (trace level
// included) going to a capture instead of the normal logger, and returns
// the llama.cpp/ggml messages. Not safe to nest; other goroutines' logging
// during f is captured (and dropped) too. At trace level (--log-level
// trace) the lines also go to stderr as they come (as JSON), so that a
// crash inside f still leaves the scheduler's dump behind.
func captureLog(f func() error) ([]string, error) {
	c := &logCapture{}
	oldLogger, oldLevel := log.Logger, zerolog.GlobalLevel()
	var w io.Writer = c
	if oldLevel == zerolog.TraceLevel {
		w = io.MultiWriter(c, os.Stderr)
	}
	log.Logger = zerolog.New(w)
	zerolog.SetGlobalLevel(zerolog.TraceLevel)
	defer func() {
		log.Logger = oldLogger
		zerolog.SetGlobalLevel(oldLevel)
	}()
	err := f()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines, err
}
