// Package safetensors reads and writes the safetensors file format of the
// Hugging Face stack (https://github.com/huggingface/safetensors), in pure Go.
//
// # Format
//
//	[8 bytes]  N, the header length, little-endian uint64
//	[N bytes]  JSON object, UTF-8, padded with spaces (the writer pads to a
//	           multiple of 8 so that the data section is 8-byte aligned):
//	             {"<name>": {"dtype": "F32", "shape": [d0, d1, …],
//	                         "data_offsets": [begin, end]}, …,
//	              "__metadata__": {"<key>": "<string value>", …}}
//	[rest]     data section: every tensor's bytes, row-major (C order, the
//	           last dimension contiguous), little-endian; offsets are relative
//	           to the start of this section, and the tensors cover it without
//	           gaps or overlaps.
//
// A torch tensor of shape [out, in] is stored as out rows of in values, which
// is byte for byte a ggml tensor of ne = [in, out]: converting between GGUF
// and safetensors reverses the shape and copies the data.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/internal/safefile"
)

// Sentinel errors; every error of this package wraps one of them or an I/O
// error.
var (
	// ErrCorrupt means the file does not follow the format (bad header
	// length, bad JSON, offsets out of range, overlapping or missing data).
	ErrCorrupt = errors.New("safetensors: corrupt file")
	// ErrUnsupported means a valid file uses a dtype this package does not
	// convert (only F32, F16 and BF16 convert to float32).
	ErrUnsupported = errors.New("safetensors: unsupported")
	// ErrNoTensor means a tensor name the file does not have.
	ErrNoTensor = errors.New("safetensors: no such tensor")
	// ErrInvalid means bad arguments to the writer (duplicate name, data
	// size not matching dtype × shape).
	ErrInvalid = errors.New("safetensors: invalid tensor")
)

// MaxHeader bounds the JSON header (the reference implementation's limit is
// 100 MB too), so a corrupt length cannot make the reader allocate gigabytes.
const MaxHeader = 100 << 20

// DType is a safetensors element type name.
type DType string

// The element types. Size knows them all; the float32 conversions handle
// F32, F16 and BF16.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	BOOL DType = "BOOL"
)

// Size is the byte size of one element, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, I16:
		return 2
	case I8, U8, BOOL:
		return 1
	}
	return 0
}

// Tensor describes one tensor of a file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64 // torch order: the last dimension is contiguous
	Begin int64   // offset of the first byte in the data section
	End   int64   // offset past the last byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// File is an open safetensors file.
type File struct {
	Path     string
	Metadata map[string]string // the "__metadata__" object (nil when absent)
	Tensors  []Tensor          // sorted by name
	index    map[string]int
	f        *os.File
	data     int64 // file offset of the data section
}

// Open reads and validates the header of the safetensors file at path. The
// tensor data is read on demand; Close releases the file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	sf, err := parse(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.f = f
	return sf, nil
}

func parse(r io.ReaderAt, size int64, path string) (*File, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the 8-byte header length", ErrCorrupt, path, size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n < 2 || n > MaxHeader || n > uint64(size-8) {
		return nil, fmt.Errorf("%w: %s: header length %d (file %d bytes, limit %d)", ErrCorrupt, path, n, size, MaxHeader)
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: header is not a JSON object: %v", ErrCorrupt, path, err)
	}
	sf := &File{Path: path, index: map[string]int{}, data: 8 + int64(n)}
	dataLen := size - sf.data
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.Metadata); err != nil {
				return nil, fmt.Errorf("%w: %s: __metadata__ is not an object of strings: %v", ErrCorrupt, path, err)
			}
			continue
		}
		var e headerEntry
		dec := json.NewDecoder(strings.NewReader(string(msg)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%w: %s: tensor %q: %v", ErrCorrupt, path, name, err)
		}
		t := Tensor{Name: name, DType: e.DType, Shape: e.Shape, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("%w: %s: tensor %q has dtype %q", ErrUnsupported, path, name, t.DType)
		}
		want := int64(t.DType.Size())
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && want > math.MaxInt64/d) {
				return nil, fmt.Errorf("%w: %s: tensor %q has shape %v", ErrCorrupt, path, name, t.Shape)
			}
			want *= d
		}
		if t.Begin < 0 || t.End < t.Begin || t.End > dataLen || t.End-t.Begin != want {
			return nil, fmt.Errorf("%w: %s: tensor %q: data_offsets [%d, %d] for %s %v (%d bytes) in a %d-byte data section",
				ErrCorrupt, path, name, t.Begin, t.End, t.DType, t.Shape, want, dataLen)
		}
		sf.Tensors = append(sf.Tensors, t)
	}
	// The tensors must tile the data section exactly, as the reference
	// implementation requires.
	byOff := append([]Tensor(nil), sf.Tensors...)
	sort.Slice(byOff, func(i, j int) bool {
		if byOff[i].Begin != byOff[j].Begin {
			return byOff[i].Begin < byOff[j].Begin
		}
		return byOff[i].End < byOff[j].End
	})
	at := int64(0)
	for _, t := range byOff {
		if t.Begin != at {
			return nil, fmt.Errorf("%w: %s: tensor %q starts at %d, previous data ends at %d (gap or overlap)", ErrCorrupt, path, t.Name, t.Begin, at)
		}
		at = t.End
	}
	if at != dataLen {
		return nil, fmt.Errorf("%w: %s: tensors cover %d of %d data bytes", ErrCorrupt, path, at, dataLen)
	}
	sort.Slice(sf.Tensors, func(i, j int) bool { return sf.Tensors[i].Name < sf.Tensors[j].Name })
	for i, t := range sf.Tensors {
		sf.index[t.Name] = i
	}
	return sf, nil
}

// Close closes the file.
func (f *File) Close() error {
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (Tensor, bool) {
	i, ok := f.index[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

// ReadRaw returns the tensor's bytes as stored.
func (f *File) ReadRaw(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q in %s", ErrNoTensor, name, f.Path)
	}
	if f.f == nil {
		return nil, fmt.Errorf("safetensors: %s: %w", f.Path, os.ErrClosed)
	}
	buf := make([]byte, t.End-t.Begin)
	if _, err := f.f.ReadAt(buf, f.data+t.Begin); err != nil {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %w", f.Path, name, err)
	}
	return buf, nil
}

// ReadF32 returns the tensor's elements as float32 (F32 as stored, F16 and
// BF16 converted exactly).
func (f *File) ReadF32(name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q in %s", ErrNoTensor, name, f.Path)
	}
	if t.DType != F32 && t.DType != F16 && t.DType != BF16 {
		return nil, fmt.Errorf("%w: tensor %q is %s (F32, F16 and BF16 convert to float32)", ErrUnsupported, name, t.DType)
	}
	raw, err := f.ReadRaw(name)
	if err != nil {
		return nil, err
	}
	return Decode(t.DType, raw)
}

// Decode converts F32, F16 or BF16 bytes to float32.
func Decode(d DType, raw []byte) ([]float32, error) {
	sz := d.Size()
	if d != F32 && d != F16 && d != BF16 {
		return nil, fmt.Errorf("%w: dtype %s does not convert to float32", ErrUnsupported, d)
	}
	if len(raw)%sz != 0 {
		return nil, fmt.Errorf("%w: %d bytes of %s", ErrCorrupt, len(raw), d)
	}
	out := make([]float32, len(raw)/sz)
	switch d {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = gguf.F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	}
	return out, nil
}

// Encode converts float32 values to F32, F16 or BF16 bytes. F16 rounds to
// nearest even (gguf.F32ToF16, ggml's conversion); BF16 rounds to nearest
// even as torch does, NaN stays NaN.
func Encode(d DType, v []float32) ([]byte, error) {
	switch d {
	case F32:
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b, nil
	case F16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], gguf.F32ToF16(x))
		}
		return b, nil
	case BF16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], F32ToBF16(x))
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: cannot encode float32 as %s", ErrUnsupported, d)
}

// F32ToBF16 rounds x to bfloat16 (round to nearest even; NaN stays a quiet
// NaN), as torch's float → bfloat16 conversion does.
func F32ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Writer collects tensors and writes a safetensors file. Tensors are
// written in the order they were added; their data may be produced lazily
// (AddFunc), so files larger than memory can be written.
type Writer struct {
	Metadata map[string]string
	// OnTensor, when set, is called after each tensor is written with the
	// bytes of tensor data written so far.
	OnTensor func(done int64)
	tensors  []wtensor
	names    map[string]bool
}

type wtensor struct {
	Tensor
	data []byte
	gen  func(io.Writer) error
}

// NewWriter returns an empty writer.
func NewWriter() *Writer { return &Writer{names: map[string]bool{}} }

func (w *Writer) add(name string, d DType, shape []int64, data []byte, gen func(io.Writer) error) error {
	if name == "" || name == "__metadata__" {
		return fmt.Errorf("%w: name %q", ErrInvalid, name)
	}
	if w.names[name] {
		return fmt.Errorf("%w: %q added twice", ErrInvalid, name)
	}
	if d.Size() == 0 {
		return fmt.Errorf("%w: %q: dtype %q", ErrUnsupported, name, d)
	}
	n := int64(d.Size())
	for _, s := range shape {
		if s < 0 || (s > 0 && n > math.MaxInt64/s) {
			return fmt.Errorf("%w: %q: shape %v", ErrInvalid, name, shape)
		}
		n *= s
	}
	if data != nil && int64(len(data)) != n {
		return fmt.Errorf("%w: %q: %d bytes for %s %v (want %d)", ErrInvalid, name, len(data), d, shape, n)
	}
	var begin int64
	if k := len(w.tensors); k > 0 {
		begin = w.tensors[k-1].End
	}
	w.names[name] = true
	w.tensors = append(w.tensors, wtensor{Tensor: Tensor{Name: name, DType: d, Shape: append([]int64(nil), shape...), Begin: begin, End: begin + n}, data: data, gen: gen})
	return nil
}

// Add adds a tensor with its bytes (row-major, little-endian).
func (w *Writer) Add(name string, d DType, shape []int64, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return w.add(name, d, shape, data, nil)
}

// AddF32 adds float32 values stored as dtype d (F32, F16 or BF16).
func (w *Writer) AddF32(name string, d DType, shape []int64, v []float32) error {
	b, err := Encode(d, v)
	if err != nil {
		return fmt.Errorf("%q: %w", name, err)
	}
	return w.Add(name, d, shape, b)
}

// AddFunc adds a tensor whose bytes gen writes when the file is written;
// gen must write exactly dtype size × elements bytes.
func (w *Writer) AddFunc(name string, d DType, shape []int64, gen func(io.Writer) error) error {
	return w.add(name, d, shape, nil, gen)
}

// Header returns the JSON header the writer writes, padded with spaces to a
// multiple of 8 bytes.
func (w *Writer) Header() ([]byte, error) {
	m := make(map[string]any, len(w.tensors)+1)
	for _, t := range w.tensors {
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		m[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{t.Begin, t.End}}
	}
	if len(w.Metadata) > 0 {
		m["__metadata__"] = w.Metadata
	}
	h, err := json.Marshal(m) // keys sorted
	if err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	return h, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteTo writes the file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	h, err := w.Header()
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: out}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(h)))
	if _, err := cw.Write(lb[:]); err != nil {
		return cw.n, err
	}
	if _, err := cw.Write(h); err != nil {
		return cw.n, err
	}
	base := cw.n
	for _, t := range w.tensors {
		if t.gen != nil {
			if err := t.gen(cw); err != nil {
				return cw.n, fmt.Errorf("safetensors: writing %q: %w", t.Name, err)
			}
		} else if _, err := cw.Write(t.data); err != nil {
			return cw.n, err
		}
		if got := cw.n - base; got != t.End {
			return cw.n, fmt.Errorf("%w: %q: wrote %d bytes, want %d", ErrInvalid, t.Name, got-t.Begin, t.End-t.Begin)
		}
		if w.OnTensor != nil {
			w.OnTensor(t.End)
		}
	}
	return cw.n, nil
}

// WriteFile writes the file to path atomically (internal/safefile): into a
// temporary file in the same directory (".<name>.tmp-PID-RANDOM", removed on
// any error), fsynced, then renamed over path, and the directory fsynced.
func (w *Writer) WriteFile(path string) error {
	return safefile.WriteFunc(path, 0o644, func(out io.Writer) error {
		_, err := w.WriteTo(out)
		return err
	})
}
