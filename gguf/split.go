package gguf

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Split models follow llama.cpp's gguf-split convention: the files are
// <prefix>-%05d-of-%05d.gguf numbered from 1; every file has split.no (u16,
// from 0), split.count (u16) and split.tensors.count (i32, the tensors of
// all files); the first file holds the model's metadata, the others only
// those three keys; each file holds a run of the tensors, in order.
const (
	KeySplitNo           = "split.no"
	KeySplitCount        = "split.count"
	KeySplitTensorsCount = "split.tensors.count"
)

// ErrSplit: a split model's files are missing, misnamed or inconsistent.
var ErrSplit = errors.New("gguf: bad split model")

// SplitPath is the path of split i (0-based) of n: <prefix>-0000(i+1)-of-0000n.gguf.
func SplitPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

// SplitPrefix is the prefix of path as split i of n, or false when path is
// not named so.
func SplitPrefix(path string, i, n int) (string, bool) {
	suffix := fmt.Sprintf("-%05d-of-%05d.gguf", i+1, n)
	if len(path) <= len(suffix) || !strings.HasSuffix(path, suffix) {
		return "", false
	}
	return strings.TrimSuffix(path, suffix), true
}

// splitKeys returns f's split.count and split.no (0, 0 when it has none).
func splitKeys(f *File) (count, no int) {
	c, _ := f.Int64(KeySplitCount)
	n, _ := f.Int64(KeySplitNo)
	return int(c), int(n)
}

// openSplits, on the first file of a split model, opens the other files
// and merges their tensors into f (see File). Nothing to do for an
// unsplit file.
func (f *File) openSplits() error {
	n, no := splitKeys(f)
	if n <= 1 {
		return nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: "+format, append([]any{f.Path, ErrSplit}, a...)...)
	}
	if n > 1<<16-1 {
		return bad("%s = %d", KeySplitCount, n)
	}
	if no != 0 {
		return bad("this is split %d of %d: open the first split (%s = 0)", no+1, n, KeySplitNo)
	}
	prefix, ok := SplitPrefix(f.Path, 0, n)
	if !ok {
		return bad("split 1 of %d must be named <prefix>-00001-of-%05d.gguf", n, n)
	}
	total, ok := f.Int64(KeySplitTensorsCount)
	if !ok {
		return bad("no %s", KeySplitTensorsCount)
	}
	f.Splits = []string{f.Path}
	f.part = make([]int, len(f.Tensors))
	for i := 1; i < n; i++ {
		path := SplitPath(prefix, i, n)
		g, err := openOne(path)
		if err != nil {
			return fmt.Errorf("%w: split %d of %d: %w", ErrSplit, i+1, n, err)
		}
		f.parts = append(f.parts, &filePart{ra: g.ra, closer: g.closer, dataOffset: g.DataOffset})
		gc, gno := splitKeys(g)
		if gc != n || gno != i {
			return bad("%s has %s = %d, %s = %d, want %d and %d", path, KeySplitCount, gc, KeySplitNo, gno, n, i)
		}
		if gt, _ := g.Int64(KeySplitTensorsCount); gt != total {
			return bad("%s has %s = %d, the first split %d", path, KeySplitTensorsCount, gt, total)
		}
		for _, ti := range g.Tensors {
			if _, dup := f.tensors[ti.Name]; dup {
				return fmt.Errorf("%s: %w: tensor %q is in two splits", f.Path, ErrCorrupt, ti.Name)
			}
			f.tensors[ti.Name] = len(f.Tensors)
			f.Tensors = append(f.Tensors, ti)
			f.part = append(f.part, i)
		}
		f.Splits = append(f.Splits, path)
		f.Size += g.Size
	}
	if int64(len(f.Tensors)) != total {
		return bad("%d tensors in %d splits, %s says %d", len(f.Tensors), n, KeySplitTensorsCount, total)
	}
	// the merged view is one model: the split keys describe storage only
	f.keys = slices.DeleteFunc(f.keys, func(k string) bool {
		return k == KeySplitNo || k == KeySplitCount || k == KeySplitTensorsCount
	})
	for _, k := range []string{KeySplitNo, KeySplitCount, KeySplitTensorsCount} {
		delete(f.kv, k)
		delete(f.types, k)
	}
	return nil
}

// WriteSplits writes the model f as n split files <prefix>-0000i-of-0000n.gguf
// in gguf-split's layout (see above): f's metadata in the first, its
// tensors in order, ⌈len/n⌉ per file (the last ones may hold fewer; every
// file holds at least one). It returns the paths. Each file is written
// atomically (Writer.WriteFile).
func WriteSplits(f *File, prefix string, n int) ([]string, error) {
	if n < 1 || n > len(f.Tensors) || n > 1<<16-1 {
		return nil, fmt.Errorf("%w: %d splits of %d tensors", ErrSplit, n, len(f.Tensors))
	}
	per := (len(f.Tensors) + n - 1) / n
	if (n-1)*per >= len(f.Tensors) { // a later file would be empty
		per = len(f.Tensors) / n
	}
	var paths []string
	for i := 0; i < n; i++ {
		w := NewWriter()
		if i == 0 {
			w.CopyMetadata(f)
		}
		w.AddKV(KeySplitNo, uint16(i))
		w.AddKV(KeySplitCount, uint16(n))
		w.AddKV(KeySplitTensorsCount, int32(len(f.Tensors)))
		lo, hi := i*per, (i+1)*per
		if i == n-1 {
			hi = len(f.Tensors)
		}
		for _, ti := range f.Tensors[lo:hi] {
			name := ti.Name
			if err := w.AddTensorFunc(name, ti.Shape, ti.Type, func(out io.Writer) error {
				raw, err := f.ReadTensorRaw(name)
				if err != nil {
					return err
				}
				_, err = out.Write(raw)
				return err
			}); err != nil {
				return nil, err
			}
		}
		path := SplitPath(prefix, i, n)
		if err := w.WriteFile(path); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}
