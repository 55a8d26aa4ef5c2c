package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/memstore"
)

var (
	memDBFlag        = &cli.StringFlag{Name: "db", Usage: "memory database `FILE` (SQLite)", Required: true, EnvVars: []string{"EMPO2_MEMORY_DB"}}
	memNSFlag        = &cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace (a task variation, e.g. boil/3)"}
	memNSReqFlag     = &cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace (a task variation, e.g. boil/3)", Required: true}
	memJSONFlag      = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
	memQueryFlag     = &cli.StringFlag{Name: "query", Usage: "text to embed and search for", Required: true}
	memKFlag         = &cli.IntFlag{Name: "k", Usage: "number of entries to return", Value: memstore.DefaultK}
	memThreshFlag    = &cli.Float64Flag{Name: "threshold", Usage: "cosine similarity an entry must exceed", Value: memstore.DefaultThreshold}
	memBySimFlag     = &cli.BoolFlag{Name: "by-similarity", Usage: "rank by similarity instead of stored score"}
	memDimFlag       = &cli.IntFlag{Name: "dim", Usage: "dimension of the built-in hash embedder a new database gets (import: when no record carries an embedding)", Value: memstore.DefaultDim}
	memEmbedFlag     = &cli.StringFlag{Name: "embed-model", Usage: "llama.cpp embedding GGUF `FILE` (default: the built-in hash embedder)"}
	memCapFlag       = &cli.IntFlag{Name: "cap", Usage: "entries kept per namespace, oldest evicted first (0: no cap); recorded in the database", DefaultText: "the recorded cap, 1000 for a new database"}
	memLimitFlag     = &cli.IntFlag{Name: "limit", Usage: "entries to show, newest first (0: all)", Value: 20}
	memContentFlag   = &cli.StringFlag{Name: "content", Usage: "tip text to store", Required: true}
	memKeyFlag       = &cli.StringFlag{Name: "key", Usage: "text whose embedding is the retrieval key (default: the content)"}
	memScoreFlag     = &cli.Float64Flag{Name: "score", Usage: "score of the episode that wrote the tip"}
	memStepFlag      = &cli.Int64Flag{Name: "step", Usage: "training step"}
	memEpisodeFlag   = &cli.StringFlag{Name: "episode", Usage: "episode id"}
	memOutFlag       = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "JSONL `FILE` to write (default: stdout); never the database or its -wal/-shm"}
	memKeepFlag      = &cli.IntFlag{Name: "keep", Usage: "keep only the N newest entries per namespace"}
	memBeforeFlag    = &cli.StringFlag{Name: "before", Usage: "delete entries older than a positive duration (72h: created more than 72 hours ago) or created before a past RFC 3339 time"}
	memDryRunFlag    = &cli.BoolFlag{Name: "dry-run", Usage: "only count the entries that would be deleted"}
	memBelowFlag     = &cli.Float64Flag{Name: "below-score", Usage: "delete entries whose score is below this"}
	memAllFlag       = &cli.BoolFlag{Name: "all", Usage: "reset every namespace (and forget the embedder)"}
	memCheckFlag     = &cli.BoolFlag{Name: "check", Usage: "also run SQLite's integrity check"}
	memTruncateFlag  = &cli.IntFlag{Name: "width", Usage: "truncate contents to this many characters in tables (0: no limit)", Value: 80}
	errMemNoSuchFile = errors.New("no such memory database")
)

func init() {
	db := []cli.Flag{memDBFlag}
	register(&cli.Command{
		Name:  "memory",
		Usage: "inspect and edit the tips memory (SQLite, cosine retrieval)",
		Description: "The memory holds, per namespace (task variation), tips written by the policy after\n" +
			"episodes, keyed by an embedding of the context. Retrieval returns entries whose\n" +
			"cosine similarity exceeds --threshold, ranked by score, top --k, and the match count.",
		Subcommands: []*cli.Command{
			{
				Name: "stats", Usage: "summarize the database and each namespace",
				Description: "Examples:\n   empo2 memory stats --db mem.db\n   empo2 memory stats --db mem.db --check --json",
				Flags:       append(db, memJSONFlag, memCheckFlag),
				Action:      memStats,
			},
			{
				Name: "list", Usage: "list entries, newest first",
				Description: "Examples:\n   empo2 memory list --db mem.db --namespace boil/3 --limit 5\n   empo2 memory list --db mem.db --json --limit 0",
				Flags:       append(db, memNSFlag, memLimitFlag, memTruncateFlag, memJSONFlag),
				Action:      memList,
			},
			{
				Name: "search", Usage: "retrieve the tips for a text as the trainer does",
				Description: "Examples:\n   empo2 memory search --db mem.db -n boil/3 --query \"You are in the kitchen\"\n" +
					"   empo2 memory search --db mem.db -n boil/3 --query \"stove\" --k 3 --threshold 0.3 --by-similarity --json",
				Flags:  append(db, memNSReqFlag, memQueryFlag, memKFlag, memThreshFlag, memBySimFlag, memEmbedFlag, memTruncateFlag, memJSONFlag),
				Action: memSearch,
			},
			{
				Name: "add", Usage: "store one tip (creates the database if needed)",
				Description: "Examples:\n   empo2 memory add --db mem.db -n boil/3 --content \"heat the pot on the stove\" --score 80\n" +
					"   empo2 memory add --db mem.db -n boil/3 --key \"You are in the kitchen\" --content \"open the fridge\" --step 12 --episode e7",
				Flags:  append(db, memNSReqFlag, memContentFlag, memKeyFlag, memScoreFlag, memStepFlag, memEpisodeFlag, memDimFlag, memEmbedFlag, memCapFlag, memJSONFlag),
				Action: memAdd,
			},
			{
				Name: "export", Usage: "write entries as JSONL (with their embeddings)",
				Description: "Examples:\n   empo2 memory export --db mem.db > mem.jsonl\n   empo2 memory export --db mem.db -n boil/3 --out boil3.jsonl",
				Flags:       append(db, memNSFlag, memOutFlag, forceFlag),
				Action:      memExport,
			},
			{
				Name: "import", Usage: "add entries from JSONL files (- for stdin); duplicates are skipped",
				ArgsUsage:   "FILE...",
				Description: "Examples:\n   empo2 memory import --db new.db mem.jsonl\n   cat tips.jsonl | empo2 memory import --db mem.db -",
				Flags:       append(db, memDimFlag, memEmbedFlag, memCapFlag, memJSONFlag),
				Action:      memImport,
			},
			{
				Name: "prune", Usage: "delete entries by age, score or count (criteria combine with OR)",
				Description: "Examples:\n   empo2 memory prune --db mem.db --keep 100\n" +
					"   empo2 memory prune --db mem.db -n boil/3 --before 72h --below-score 0 --dry-run",
				Flags:  append(db, memNSFlag, memKeepFlag, memBeforeFlag, memBelowFlag, memDryRunFlag, memJSONFlag),
				Action: memPrune,
			},
			{
				Name: "reset", Usage: "delete a namespace, or everything with --all",
				Description: "Examples:\n   empo2 memory reset --db mem.db -n boil/3\n   empo2 memory reset --db mem.db --all",
				Flags:       append(db, memNSFlag, memAllFlag, memJSONFlag),
				Action:      memReset,
			},
		},
	})
}

// memOpen opens the database named by --db as memstore.OpenFile does
// (read accesses read-only; only add and import create a file).
func memOpen(c *cli.Context, a memstore.Access, opts ...memstore.Option) (*memstore.Store, error) {
	path := c.String(memDBFlag.Name)
	if strings.TrimSpace(path) == "" {
		return nil, fmt.Errorf("--db is empty: give the memory database file")
	}
	return memstore.OpenFile(path, a, opts...)
}

// memRemoveIfNew removes a database file (and its -wal/-shm) that the
// failed command itself created: a failure leaves no empty database behind.
func memRemoveIfNew(path string, existed bool, err error) {
	if err == nil || existed {
		return
	}
	memstore.RemoveFiles(path)
}

// memEmbedder loads --embed-model (nil when not given; close it) and
// reads --dim as an explicit request (0 when not given).
func memEmbedder(c *cli.Context) (model *llama.Embedder, dim int, err error) {
	if c.IsSet(memDimFlag.Name) {
		if dim = c.Int(memDimFlag.Name); dim <= 0 {
			dim = memstore.DefaultDim
		}
	}
	p := c.String(memEmbedFlag.Name)
	if p == "" {
		return nil, dim, nil
	}
	e, err := llama.NewEmbedder(p, llama.EmbedderOptions{})
	if err != nil {
		return nil, dim, fmt.Errorf("--embed-model: %w", err)
	}
	return e, dim, nil
}

// memAttachEmbedder gives s an embedder (memstore's AttachEmbedder):
// --embed-model when set, a hash embedder of --dim when given, else the
// built-in one the database records, else (create) the default hash
// embedder. It returns a closer for a loaded model.
func memAttachEmbedder(c *cli.Context, s *memstore.Store, create bool) (func(), error) {
	model, dim, err := memEmbedder(c)
	if err != nil {
		return func() {}, err
	}
	closeModel := func() {}
	var emb memstore.Embedder
	if model != nil {
		emb, closeModel = model, func() { model.Close() }
	}
	return closeModel, memEmbedderErr(s.AttachEmbedder(emb, dim, create))
}

// memEmbedderErr says which flag gives a recorded embedder's model.
func memEmbedderErr(err error) error {
	if errors.Is(err, memstore.ErrNoEmbedder) {
		return fmt.Errorf("%w; pass that model with --embed-model", err)
	}
	return err
}

// memCap passes --cap only when given: otherwise the database's recorded cap applies.
func memCap(c *cli.Context) ([]memstore.Option, error) {
	if !c.IsSet(memCapFlag.Name) {
		return nil, nil
	}
	n := c.Int(memCapFlag.Name)
	if n < 0 {
		return nil, fmt.Errorf("--cap %d: want 0 (no cap) or a positive number of entries per namespace", n)
	}
	return []memstore.Option{memstore.WithCap(n)}, nil
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if n <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-1, 0)]) + "…"
}

func fmtScore(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func memStats(c *cli.Context) error {
	s, err := memOpen(c, memstore.AccessMetaOnly)
	if err != nil {
		return err
	}
	defer s.Close()
	if c.Bool(memCheckFlag.Name) {
		if err := s.Check(c.Context); err != nil {
			return err
		}
	}
	st, err := s.Stats(c.Context)
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool(memJSONFlag.Name) {
		return printJSON(w, st)
	}
	emb := st.Embedder
	if emb == "" {
		emb = "(none yet)"
	}
	fmt.Fprintf(w, "database   %s (%s, schema v%d)\n", st.Path, humanBytes(st.FileBytes), st.SchemaVersion)
	fmt.Fprintf(w, "embedder   %s, dim %d\n", emb, st.Dim)
	fmt.Fprintf(w, "entries    %d in %d namespaces\n", st.Entries, len(st.Namespaces))
	if st.Cap > 0 {
		fmt.Fprintf(w, "cap        %d per namespace (oldest evicted first)\n", st.Cap)
	} else {
		fmt.Fprintln(w, "cap        none")
	}
	if c.Bool(memCheckFlag.Name) {
		fmt.Fprintln(w, "integrity  ok")
	}
	if len(st.Namespaces) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "NAMESPACE", "ENTRIES", "MIN SCORE", "MEAN SCORE", "MAX SCORE", "OLDEST", "NEWEST")
	for _, n := range st.Namespaces {
		t.Append([]string{n.Name, strconv.Itoa(n.Count), fmtScore(n.MinScore), fmtScore(n.MeanScore), fmtScore(n.MaxScore), fmtTime(n.Oldest), fmtTime(n.Newest)})
	}
	t.Render()
	return nil
}

func memList(c *cli.Context) error {
	s, err := memOpen(c, memstore.AccessMetaOnly)
	if err != nil {
		return err
	}
	defer s.Close()
	es, err := s.List(c.Context, c.String(memNSFlag.Name), c.Int(memLimitFlag.Name))
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool(memJSONFlag.Name) {
		if es == nil {
			es = []memstore.Entry{}
		}
		return printJSON(w, es)
	}
	if len(es) == 0 {
		fmt.Fprintln(w, "no entries")
		return nil
	}
	t := newTable(w, "ID", "NAMESPACE", "SCORE", "STEP", "EPISODE", "CREATED", "CONTENT")
	width := c.Int(memTruncateFlag.Name)
	for _, e := range es {
		t.Append([]string{strconv.FormatInt(e.ID, 10), e.Namespace, fmtScore(e.Score), strconv.FormatInt(e.Step, 10), e.Episode, fmtTime(e.Created), truncate(e.Content, width)})
	}
	t.Render()
	return nil
}

// memSearchReport is what `memory search --json` prints.
type memSearchReport struct {
	Namespace       string           `json:"namespace"`
	Query           string           `json:"query"`
	Threshold       float64          `json:"threshold"`
	K               int              `json:"k"`
	Count           int              `json:"count"`
	IntrinsicReward float64          `json:"intrinsic_reward"`
	Entries         []memstore.Match `json:"entries"`
}

func memSearch(c *cli.Context) error {
	// Check the arguments before touching the database.
	thr := c.Float64(memThreshFlag.Name)
	q, err := memstore.SearchQuery(c.Int(memKFlag.Name), thr, c.Bool(memBySimFlag.Name))
	if err != nil {
		return fmt.Errorf("--%w", err)
	}
	text := c.String(memQueryFlag.Name)
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("--query is empty: give the text to search for")
	}
	if strings.TrimSpace(c.String(memNSReqFlag.Name)) == "" {
		return fmt.Errorf("--namespace is empty: give a namespace such as boil/3")
	}
	s, err := memOpen(c, memstore.AccessRead)
	if err != nil {
		return err
	}
	defer s.Close()
	closeEmb, err := memAttachEmbedder(c, s, false)
	defer closeEmb()
	if err != nil {
		return err
	}
	ns := c.String(memNSReqFlag.Name)
	res, err := s.RetrieveText(c.Context, ns, text, q)
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool(memJSONFlag.Name) {
		return printJSON(w, memSearchReport{Namespace: ns, Query: text, Threshold: thr, K: q.K,
			Count: res.Count, IntrinsicReward: algo.IntrinsicReward(len(res.Entries), 1), Entries: res.Entries})
	}
	fmt.Fprintf(w, "%d entries above %.3g in %s; showing %d; intrinsic reward %.4g\n", res.Count, thr, ns, len(res.Entries), algo.IntrinsicReward(len(res.Entries), 1))
	if len(res.Entries) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "RANK", "SIMILARITY", "SCORE", "STEP", "CONTENT")
	width := c.Int(memTruncateFlag.Name)
	for i, m := range res.Entries {
		t.Append([]string{strconv.Itoa(i + 1), strconv.FormatFloat(float64(m.Similarity), 'f', 3, 32), fmtScore(m.Score), strconv.FormatInt(m.Step, 10), truncate(m.Content, width)})
	}
	t.Render()
	return nil
}

func memAdd(c *cli.Context) (err error) {
	ns := c.String(memNSReqFlag.Name)
	entry := memstore.Entry{Content: c.String(memContentFlag.Name), Key: c.String(memKeyFlag.Name), Score: c.Float64(memScoreFlag.Name),
		Step: c.Int64(memStepFlag.Name), Episode: c.String(memEpisodeFlag.Name)}
	if err := memstore.CheckEntry(ns, entry); err != nil {
		return fmt.Errorf("--%w", err)
	}
	capOpt, err := memCap(c)
	if err != nil {
		return err
	}
	path := c.String(memDBFlag.Name)
	existed := memstore.FileExists(path)
	s, err := memOpen(c, memstore.AccessCreate, capOpt...)
	if err != nil {
		return err
	}
	defer func() { s.Close(); memRemoveIfNew(path, existed, err) }()
	closeEmb, err := memAttachEmbedder(c, s, true)
	defer closeEmb()
	if err != nil {
		return err
	}
	n, err := s.Add(c.Context, ns, []memstore.Entry{entry})
	if err != nil {
		return err
	}
	if c.Bool(memJSONFlag.Name) {
		return printJSON(c.App.Writer, map[string]int{"added": n})
	}
	if n == 0 {
		fmt.Fprintf(c.App.Writer, "duplicate content in %s: skipped\n", ns)
	} else {
		fmt.Fprintf(c.App.Writer, "added 1 entry to %s\n", ns)
	}
	return nil
}

func memExport(c *cli.Context) error {
	out := c.String(memOutFlag.Name)
	if out != "" && out != "-" {
		// inside a run directory only as the run's memory.jsonl, the export
		// of its memory.db (the run's layout; scripts/exptable reads it)
		o := safefile.Path{Flag: "--out", Path: out, RunLayout: []string{"memory.jsonl"}}
		if err := safefile.CheckOutputs([]safefile.Path{o}, dbPaths("--db", c.String(memDBFlag.Name))); err != nil {
			return err
		}
		if err := checkNew(c, o); err != nil {
			return err
		}
	}
	s, err := memOpen(c, memstore.AccessMetaOnly)
	if err != nil {
		return err
	}
	defer s.Close()
	var w io.Writer = c.App.Writer
	var f *safefile.File
	if out != "" && out != "-" {
		if f, err = safefile.Create(out, 0o644); err != nil {
			return err
		}
		defer f.Abort()
		w = f
	}
	n, err := s.Export(c.Context, w, c.String(memNSFlag.Name))
	if err == nil && f != nil {
		err = f.Commit()
	}
	if err != nil {
		return err
	}
	log.Info().Int("entries", n).Str("db", s.Path()).Msg("exported")
	return nil
}

func memImport(c *cli.Context) (err error) {
	if c.NArg() == 0 {
		return fmt.Errorf("memory import: name one or more JSONL files (- for stdin)")
	}
	capOpt, err := memCap(c)
	if err != nil {
		return err
	}
	var inputs []safefile.Path
	for _, p := range c.Args().Slice() {
		if p != "-" && !memstore.FileExists(p) {
			return fmt.Errorf("memory import: %s: no such file", p)
		}
		if p != "-" {
			inputs = append(inputs, safefile.Path{Flag: "FILE", Path: p})
		}
	}
	path := c.String(memDBFlag.Name)
	if err := safefile.CheckOutputs([]safefile.Path{{Flag: "--db", Path: path}}, inputs); err != nil {
		return err
	}
	existed := memstore.FileExists(path)
	s, err := memOpen(c, memstore.AccessCreate, capOpt...)
	if err != nil {
		return err
	}
	defer func() { s.Close(); memRemoveIfNew(path, existed, err) }()
	// An embedder is attached when one is asked for or recorded; otherwise
	// a new database adopts the embedder of the file's records (PrepareImport).
	model, dim, err := memEmbedder(c)
	if err != nil {
		return err
	}
	var emb memstore.Embedder
	if model != nil {
		defer model.Close()
		emb = model
	}
	opt, err := s.PrepareImport(emb, dim)
	if err != nil {
		return memEmbedderErr(err)
	}
	total, err := s.ImportFiles(c.Context, c.Args().Slice(), opt, func(r io.Reader, size int64, p string) (io.Reader, func()) {
		return progressReader(r, size, "importing "+p)
	})
	if err != nil {
		return err
	}
	if c.Bool(memJSONFlag.Name) {
		return printJSON(c.App.Writer, total)
	}
	fmt.Fprintf(c.App.Writer, "read %d records, added %d (%d duplicates skipped)\n", total.Read, total.Added, total.Read-total.Added)
	return nil
}

// progressMinBytes is the input size from which long reads show a bar.
const progressMinBytes = 4 << 20

// progressReader wraps r in a progress bar on stderr (bytes read of size)
// when stderr is a terminal and the input is big or of unknown size; done
// finishes the bar.
func progressReader(r io.Reader, size int64, desc string) (io.Reader, func()) {
	return progressReaderTo(r, size, desc, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
}

func progressReaderTo(r io.Reader, size int64, desc string, w io.Writer, show bool) (io.Reader, func()) {
	if !show || (size >= 0 && size < progressMinBytes) {
		return r, func() {}
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
	pr := progressbar.NewReader(r, bar)
	return &pr, func() { bar.Finish() }
}

func memPrune(c *cli.Context) error {
	o := memstore.PruneOptions{Namespace: c.String(memNSFlag.Name), Keep: c.Int(memKeepFlag.Name), DryRun: c.Bool(memDryRunFlag.Name)}
	if c.IsSet(memKeepFlag.Name) && o.Keep <= 0 {
		return fmt.Errorf("--keep %d: want a positive number", o.Keep)
	}
	if c.IsSet(memBeforeFlag.Name) {
		t, err := parseBefore(c.String(memBeforeFlag.Name), time.Now())
		if err != nil {
			return err
		}
		o.Before = t
	}
	if c.IsSet(memBelowFlag.Name) {
		v := c.Float64(memBelowFlag.Name)
		if math.IsNaN(v) {
			return fmt.Errorf("--below-score NaN: want a number")
		}
		o.BelowScore = &v
	}
	if o.Keep <= 0 && o.Before.IsZero() && o.BelowScore == nil {
		return fmt.Errorf("memory prune: give --keep, --before or --below-score")
	}
	mode := memstore.AccessWrite
	if o.DryRun {
		mode = memstore.AccessMetaOnly
	}
	s, err := memOpen(c, mode)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := s.Prune(c.Context, o)
	if err != nil {
		return err
	}
	if o.DryRun {
		if c.Bool(memJSONFlag.Name) {
			return printJSON(c.App.Writer, map[string]any{"would_remove": n, "dry_run": true})
		}
		fmt.Fprintf(c.App.Writer, "would remove %d entries (dry run: nothing deleted)\n", n)
		return nil
	}
	return printRemoved(c, n)
}

// parseBefore reads --before (memstore.ParseBefore).
func parseBefore(b string, now time.Time) (time.Time, error) {
	t, err := memstore.ParseBefore(b, now)
	if err != nil {
		return t, fmt.Errorf("--before %w", err)
	}
	return t, nil
}

func memReset(c *cli.Context) error {
	ns := c.String(memNSFlag.Name)
	all := c.Bool(memAllFlag.Name)
	if (ns == "") == !all {
		return fmt.Errorf("memory reset: give exactly one of --namespace and --all")
	}
	s, err := memOpen(c, memstore.AccessWrite)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := s.Reset(c.Context, ns)
	if err != nil {
		return err
	}
	return printRemoved(c, n)
}

// printRemoved reports how many entries prune or reset deleted.
func printRemoved(c *cli.Context, n int) error {
	if c.Bool(memJSONFlag.Name) {
		return printJSON(c.App.Writer, map[string]int{"removed": n})
	}
	fmt.Fprintf(c.App.Writer, "removed %d entries\n", n)
	return nil
}
