package runfiles

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/empo2/empo2/gguf"
)

// RunFormat is the version of run.json this package writes.
const RunFormat = 1

// Run is run.json, the marker of a run directory: train writes it first
// when it makes a run and refuses a directory that holds files but no
// marker (it is not a run train made, and nothing in it may be replaced
// or removed). It also records the identity of the base model, checked
// when the run is resumed.
type Run struct {
	Format  int       `json:"format"`
	Created time.Time `json:"created"`
	Model   ModelID   `json:"model"`
}

// ModelID identifies a model file: its absolute path, size and
// fingerprint (Fingerprint).
type ModelID struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`
	Fingerprint string `json:"fingerprint"`
}

// ErrRunFile: run.json is missing, unreadable or of an unknown format.
var ErrRunFile = errors.New("run marker")

// ReadRun reads dir's run.json.
func ReadRun(path string) (Run, error) {
	var r Run
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrRunFile, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrRunFile, path, err)
	}
	if r.Format != RunFormat {
		return r, fmt.Errorf("%w: %s: format %d (this empo2 reads %d)", ErrRunFile, path, r.Format, RunFormat)
	}
	return r, nil
}

// Marshal is r as run.json's bytes.
func (r Run) Marshal() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// fingerprintChunk is the size of each sample of the data section.
const fingerprintChunk = 1 << 20

// fingerprintSamples is the number of samples after the first one.
const fingerprintSamples = 16

// Fingerprint identifies a GGUF model cheaply: SHA-256 over the file size,
// every byte before the data section (header, metadata, tensor index: the
// architecture, tokenizer and every tensor's name, type and shape) and 17
// samples of the data section of 1 MiB each: its first MiB and the MiB
// ending at each sixteenth of it (the last ends at the file's end). A
// model split into several files (gguf-split) is fingerprinted file by
// file in split order, each further split sampled the same way from its
// first byte. A 15 GB model costs some 20 MiB of reads per file, so a
// resume checks it in well under a second; a model that differs only
// inside unsampled tensor bytes (rare: a fine-tune changes every sample of
// the weights it touches) is not told apart. Size is the total of every
// split.
func Fingerprint(path string) (ModelID, error) {
	id := ModelID{Path: path}
	g, err := gguf.Open(path)
	if err != nil {
		return id, err
	}
	files := g.Splits
	if len(files) == 0 {
		files = []string{path}
	}
	off := int64(g.DataOffset)
	g.Close()
	h := sha256.New()
	for i, p := range files {
		if i > 0 {
			off = 0
		}
		n, err := fingerprintFile(h, p, off)
		if err != nil {
			return id, fmt.Errorf("fingerprint %s: %w", p, err)
		}
		id.Size += n
	}
	id.Fingerprint = "sha256-sampled:" + hex.EncodeToString(h.Sum(nil))
	return id, nil
}

// fingerprintFile hashes one file into h: its size, the bytes before off
// and 1 MiB samples of the bytes from off on (see Fingerprint); it returns
// the size.
func fingerprintFile(h io.Writer, path string, off int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	off = min(off, size)
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(size))
	h.Write(sz[:])
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, off)); err != nil {
		return 0, err
	}
	data := size - off
	sample := func(end int64) error {
		start := max(off, end-fingerprintChunk)
		_, err := io.Copy(h, io.NewSectionReader(f, start, end-start))
		return err
	}
	if err := sample(min(size, off+fingerprintChunk)); err != nil {
		return 0, err
	}
	for k := int64(1); k <= fingerprintSamples; k++ {
		if err := sample(off + data*k/fingerprintSamples); err != nil {
			return 0, err
		}
	}
	return size, nil
}
