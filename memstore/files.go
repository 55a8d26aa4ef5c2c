package memstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// Administration of a database file, as `empo2 memory` does it: how a
// command opens the file (Access), the files SQLite keeps beside it, which
// embedder a store gets (AttachEmbedder), searches with the command's
// threshold rule (SearchQuery) and the age selector of prune (ParseBefore).
// The store knows nothing of EMPO²'s prompts or rewards.

// Access says how OpenFile opens a database file.
type Access int

const (
	AccessCreate   Access = iota // read-write, created when missing (add, import)
	AccessWrite                  // read-write, must exist (prune, reset)
	AccessRead                   // read-only, with the vector index (search)
	AccessMetaOnly               // read-only, no embeddings read (stats, list, export)
)

// ErrNoDatabase: OpenFile was asked for an existing database and found no
// file.
var ErrNoDatabase = errors.New("no such memory database")

// OpenFile opens the database file path without an embedder (attach one
// with AttachEmbedder). Read accesses open it read-only (a read-only file
// or directory works, nothing is written); every access but AccessCreate
// refuses to create a new file (ErrNoDatabase).
func OpenFile(path string, a Access, opts ...Option) (*Store, error) {
	if strings.TrimSpace(path) == "" {
		return nil, fmt.Errorf("%w: the database path is empty", ErrInvalid)
	}
	if a != AccessCreate && !FileExists(path) {
		return nil, fmt.Errorf("%w: %s", ErrNoDatabase, path)
	}
	switch a {
	case AccessRead:
		opts = append(opts, ReadOnly())
	case AccessMetaOnly:
		opts = append(opts, ReadOnly(), WithoutIndex())
	case AccessWrite:
		opts = append(opts, WithoutIndex())
	}
	return Open(path, nil, opts...)
}

// FileExists reports whether path names an existing file (or anything
// os.Stat can see).
func FileExists(path string) bool { _, err := os.Stat(path); return err == nil }

// fileSuffixes are the files SQLite keeps beside a database.
var fileSuffixes = []string{"", "-wal", "-shm", "-journal"}

// Files are the database file path and the files SQLite keeps beside it
// (-wal, -shm, -journal): writing over any of them destroys the database.
func Files(path string) []string {
	if path == "" {
		return nil
	}
	out := make([]string, len(fileSuffixes))
	for i, suf := range fileSuffixes {
		out[i] = path + suf
	}
	return out
}

// RemoveFiles removes the database file path and its companion Files
// (a database that a failed command itself created).
func RemoveFiles(path string) {
	for _, p := range Files(path) {
		os.Remove(p)
	}
}

// AttachEmbedder gives s an embedder: model when not nil; else, with dim >
// 0, a hash embedder of that dimension (asked for explicitly); else the
// built-in one the database records; else (a database without one), when
// create, a hash embedder of DefaultDim, and none otherwise. A recorded
// embedder that is not built in needs its model: ErrNoEmbedder.
func (s *Store) AttachEmbedder(model Embedder, dim int, create bool) error {
	if model != nil {
		return s.SetEmbedder(model)
	}
	if dim > 0 {
		return s.SetEmbedder(NewHashEmbedder(dim))
	}
	id, _ := s.Embedder()
	if id == "" {
		if !create {
			return nil
		}
		return s.SetEmbedder(NewHashEmbedder(DefaultDim))
	}
	e, ok := BuiltinEmbedder(id)
	if !ok {
		return fmt.Errorf("%w: the database was built with %q, which is not built in: attach that model's embedder", ErrNoEmbedder, id)
	}
	return s.SetEmbedder(e)
}

// SearchQuery is the query of a search that returns the top k entries
// whose cosine similarity exceeds threshold (in [-1, 1]; 0 means "> 0",
// not the default), by stored score (stable) or by similarity. Errors
// start with the argument's name (k, threshold).
func SearchQuery(k int, threshold float64, bySimilarity bool) (Query, error) {
	q := Query{K: k, Threshold: float32(threshold), Order: OrderByScoreStable}
	if q.K <= 0 {
		return q, fmt.Errorf("k %d: want a positive number", q.K)
	}
	if !(threshold >= -1 && threshold <= 1) {
		return q, fmt.Errorf("threshold %v: want a cosine similarity in [-1, 1]", threshold)
	}
	if threshold == 0 {
		q.Threshold = math.SmallestNonzeroFloat32 // "> 0" (Threshold 0 would mean the default)
	}
	if bySimilarity {
		q.Order = OrderBySimilarity
	}
	return q, nil
}

// CheckEntry checks, before a database is opened, what Add would refuse
// of entry e in namespace ns: empty content or namespace, a score that is
// not finite, text that is not UTF-8. Errors start with the field's name
// (content, namespace, score, key, episode).
func CheckEntry(ns string, e Entry) error {
	switch {
	case strings.TrimSpace(e.Content) == "":
		return fmt.Errorf("content is empty: give the tip text to store")
	case strings.TrimSpace(ns) == "":
		return fmt.Errorf("namespace is empty: give a namespace such as boil/3")
	case math.IsNaN(e.Score) || math.IsInf(e.Score, 0):
		return fmt.Errorf("score %v: want a finite number", e.Score)
	}
	for _, f := range []struct{ name, text string }{{"content", e.Content}, {"key", e.Key}, {"episode", e.Episode}, {"namespace", ns}} {
		if !utf8.ValidString(f.text) {
			return fmt.Errorf("%s is not valid UTF-8: the memory stores text only", f.name)
		}
	}
	return nil
}

// ParseBefore reads prune's age selector: a positive duration (entries
// created more than that long before now) or an RFC 3339 time in the past.
// A negative or zero duration, or a future time, would select every entry:
// refused. Errors start with b.
func ParseBefore(b string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(b); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%s: want a positive age such as 72h (a zero or negative one would delete every entry)", b)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, b)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a positive duration (72h) or an RFC 3339 time", b)
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("%s is in the future: it would delete every entry", b)
	}
	return t, nil
}

// PrepareImport readies s for ImportFiles: when an embedder is asked for
// (model, or dim > 0) or the database records one, it is attached
// (AttachEmbedder); otherwise the options returned embed the records
// without embeddings with a hash embedder of DefaultDim, and a new database
// adopts the embedder of the records that carry one.
func (s *Store) PrepareImport(model Embedder, dim int) (ImportOptions, error) {
	if id, _ := s.Embedder(); id != "" || model != nil || dim > 0 {
		return ImportOptions{}, s.AttachEmbedder(model, dim, true)
	}
	return ImportOptions{DefaultEmbedder: NewHashEmbedder(DefaultDim)}, nil
}

// ImportFiles adds the JSONL Records of each named file ("-": stdin) with
// ImportWith, in order, and returns the totals. wrap, when set, wraps each
// reader (a progress bar: size is the file's, -1 for stdin); the function
// it returns is called when the file is read. An import error names its
// file.
func (s *Store) ImportFiles(ctx context.Context, paths []string, opt ImportOptions,
	wrap func(r io.Reader, size int64, path string) (io.Reader, func())) (ImportStats, error) {
	var total ImportStats
	for _, p := range paths {
		var r io.Reader = os.Stdin
		var size int64 = -1
		if p != "-" {
			f, err := os.Open(p)
			if err != nil {
				return total, err
			}
			defer f.Close()
			r = f
			if fi, err := f.Stat(); err == nil {
				size = fi.Size()
			}
		}
		done := func() {}
		if wrap != nil {
			r, done = wrap(r, size, p)
		}
		st, err := s.ImportWith(ctx, r, opt)
		done()
		if err != nil {
			return total, fmt.Errorf("%s: %w", p, err)
		}
		total.Read += st.Read
		total.Added += st.Added
	}
	return total, nil
}
