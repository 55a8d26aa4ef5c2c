package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/empo2/empo2/internal/safefile"
)

// Writer builds a GGUF v3 file in memory (metadata and tensor descriptors;
// tensor data either in memory or produced on demand) and writes it with
// WriteFile. Errors from Add* calls that cannot return one (AddKV) are kept
// and returned by WriteFile.
type Writer struct {
	// Alignment of tensor data; 0 means general.alignment if set with AddKV
	// (a u32), else DefaultAlignment. A value other than 32 is also written
	// as general.alignment.
	Alignment uint64
	// Progress, if set, is called as tensor data is written with the bytes
	// written so far and the total.
	Progress func(done, total int64)

	keys    []string
	kv      map[string]any
	tensors []wtensor
	names   map[string]bool
	err     error
}

type wtensor struct {
	info TensorInfo
	size uint64
	data []byte
	gen  func(io.Writer) error
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{kv: map[string]any{}, names: map[string]bool{}}
}

// normalize maps v to one of the value kinds Get returns. Go int/uint and
// []int are accepted for convenience (int32 or int64 by range).
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64,
		[]uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return v, nil
	case int:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return int32(x), nil
		}
		return int64(x), nil
	case uint:
		if x <= math.MaxUint32 {
			return uint32(x), nil
		}
		return uint64(x), nil
	case []int:
		fits := true
		for _, e := range x {
			if e < math.MinInt32 || e > math.MaxInt32 {
				fits = false
			}
		}
		if fits {
			out := make([]int32, len(x))
			for i, e := range x {
				out[i] = int32(e)
			}
			return out, nil
		}
		out := make([]int64, len(x))
		for i, e := range x {
			out[i] = int64(e)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: metadata value of Go type %T", ErrUnsupportedType, v)
}

// AddKV sets metadata key to v (a kind Get returns; int, uint and []int are
// converted). Setting an existing key replaces its value in place.
func (w *Writer) AddKV(key string, v any) {
	nv, err := normalize(v)
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("key %q: %w", key, err)
		}
		return
	}
	if _, ok := w.kv[key]; !ok {
		w.keys = append(w.keys, key)
	}
	w.kv[key] = nv
}

// CopyMetadata adds every metadata key of f, in f's order, and takes f's
// alignment (Alignment = f.Alignment; general.alignment itself is not
// copied: WriteTo writes it from Alignment): the start of a copy of f to
// which the caller adds keys and tensors.
func (w *Writer) CopyMetadata(f *File) {
	w.Alignment = f.Alignment
	for _, k := range f.keys {
		if k == KeyAlignment {
			continue
		}
		w.AddKV(k, f.kv[k])
	}
}

func (w *Writer) addTensor(name string, shape []uint64, t GGMLType, data []byte, gen func(io.Writer) error) error {
	if name == "" {
		return fmt.Errorf("%w: empty tensor name", ErrCorrupt)
	}
	if w.names[name] {
		return fmt.Errorf("%w: duplicate tensor %q", ErrCorrupt, name)
	}
	size, err := tensorSize(name, shape, t)
	if err != nil {
		return err
	}
	if data != nil && uint64(len(data)) != size {
		return fmt.Errorf("%w: tensor %q %s %v needs %d bytes, got %d", ErrCorrupt, name, t, shape, size, len(data))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, wtensor{
		info: TensorInfo{Name: name, Shape: append([]uint64(nil), shape...), Type: t},
		size: size, data: data, gen: gen,
	})
	return nil
}

func numElements(shape []uint64) uint64 {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// AddTensorF32 adds an F32 tensor; len(data) must equal the shape's element count.
func (w *Writer) AddTensorF32(name string, shape []uint64, data []float32) error {
	if _, err := tensorSize(name, shape, TypeF32); err != nil {
		return err
	}
	if uint64(len(data)) != numElements(shape) {
		return fmt.Errorf("%w: tensor %q shape %v has %d elements, got %d", ErrCorrupt, name, shape, numElements(shape), len(data))
	}
	return w.addTensor(name, shape, TypeF32, EncodeF32(data), nil)
}

// AddTensorF16 adds an F16 tensor, converting data (round to nearest even).
func (w *Writer) AddTensorF16(name string, shape []uint64, data []float32) error {
	if _, err := tensorSize(name, shape, TypeF16); err != nil {
		return err
	}
	if uint64(len(data)) != numElements(shape) {
		return fmt.Errorf("%w: tensor %q shape %v has %d elements, got %d", ErrCorrupt, name, shape, numElements(shape), len(data))
	}
	return w.addTensor(name, shape, TypeF16, EncodeF16(data), nil)
}

// AddTensorRaw adds a tensor of any known type from its encoded bytes.
func (w *Writer) AddTensorRaw(name string, shape []uint64, t GGMLType, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return w.addTensor(name, shape, t, data, nil)
}

// AddTensorFunc adds a tensor whose encoded bytes are produced by write when
// the file is written (so large models need not be held in memory). write
// must write exactly the tensor's size in bytes.
func (w *Writer) AddTensorFunc(name string, shape []uint64, t GGMLType, write func(io.Writer) error) error {
	if write == nil {
		return fmt.Errorf("gguf: AddTensorFunc %q: nil write function", name)
	}
	return w.addTensor(name, shape, t, nil, write)
}

// EncodeF32 returns data as little-endian F32 bytes.
func EncodeF32(data []float32) []byte {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// EncodeF16 returns data converted to little-endian F16 bytes.
func EncodeF16(data []float32) []byte {
	b := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(v))
	}
	return b
}

type countWriter struct {
	w io.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

func putString(w io.Writer, s string) error {
	if err := binary.Write(w, binary.LittleEndian, uint64(len(s))); err != nil {
		return err
	}
	_, err := io.WriteString(w, s)
	return err
}

func valueType(v any) (t ValueType, isArray bool) {
	switch v.(type) {
	case uint8:
		return ValUint8, false
	case int8:
		return ValInt8, false
	case uint16:
		return ValUint16, false
	case int16:
		return ValInt16, false
	case uint32:
		return ValUint32, false
	case int32:
		return ValInt32, false
	case float32:
		return ValFloat32, false
	case bool:
		return ValBool, false
	case string:
		return ValString, false
	case uint64:
		return ValUint64, false
	case int64:
		return ValInt64, false
	case float64:
		return ValFloat64, false
	case []uint8:
		return ValUint8, true
	case []int8:
		return ValInt8, true
	case []uint16:
		return ValUint16, true
	case []int16:
		return ValInt16, true
	case []uint32:
		return ValUint32, true
	case []int32:
		return ValInt32, true
	case []float32:
		return ValFloat32, true
	case []bool:
		return ValBool, true
	case []string:
		return ValString, true
	case []uint64:
		return ValUint64, true
	case []int64:
		return ValInt64, true
	case []float64:
		return ValFloat64, true
	}
	panic("gguf: unnormalized value") // unreachable: AddKV normalizes
}

func putValue(w io.Writer, v any) error {
	t, isArray := valueType(v)
	if !isArray {
		if err := binary.Write(w, binary.LittleEndian, uint32(t)); err != nil {
			return err
		}
	} else {
		if err := binary.Write(w, binary.LittleEndian, [2]uint32{uint32(ValArray), uint32(t)}); err != nil {
			return err
		}
	}
	switch x := v.(type) {
	case string:
		return putString(w, x)
	case []string:
		if err := binary.Write(w, binary.LittleEndian, uint64(len(x))); err != nil {
			return err
		}
		for _, s := range x {
			if err := putString(w, s); err != nil {
				return err
			}
		}
		return nil
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		_, err := w.Write([]byte{b})
		return err
	case []bool:
		if err := binary.Write(w, binary.LittleEndian, uint64(len(x))); err != nil {
			return err
		}
		b := make([]byte, len(x))
		for i, e := range x {
			if e {
				b[i] = 1
			}
		}
		_, err := w.Write(b)
		return err
	}
	if isArray {
		n, _ := arrayLen(v)
		if err := binary.Write(w, binary.LittleEndian, uint64(n)); err != nil {
			return err
		}
	}
	return binary.Write(w, binary.LittleEndian, v)
}

func arrayLen(v any) (int, bool) {
	f := File{kv: map[string]any{"": v}}
	return f.ArrayLen("")
}

// WriteTo writes the file to out. It returns the number of bytes written.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	align := w.Alignment
	if align == 0 {
		align = DefaultAlignment
		if a, ok := w.kv[KeyAlignment].(uint32); ok {
			align = uint64(a) // set through AddKV
		}
	}
	if align == 0 {
		return 0, fmt.Errorf("%w: alignment 0", ErrCorrupt)
	}
	if align&(align-1) != 0 || align > math.MaxUint32 {
		return 0, fmt.Errorf("%w: alignment %d is not a power of two", ErrCorrupt, align)
	}
	keys := w.keys
	kv := w.kv
	if _, set := kv[KeyAlignment]; !set && align != DefaultAlignment {
		keys = append(append([]string(nil), keys...), KeyAlignment)
		kv = map[string]any{KeyAlignment: uint32(align)}
		for k, v := range w.kv {
			kv[k] = v
		}
	} else if set {
		if a, ok := kv[KeyAlignment].(uint32); !ok || uint64(a) != align {
			return 0, fmt.Errorf("%w: %s = %v disagrees with Writer.Alignment %d", ErrCorrupt, KeyAlignment, kv[KeyAlignment], align)
		}
	}

	cw := &countWriter{w: out}
	bw := bufio.NewWriterSize(cw, 1<<20)
	hdr := struct {
		Magic    [4]byte
		Version  uint32
		NTensors uint64
		NKV      uint64
	}{[4]byte{'G', 'G', 'U', 'F'}, Version, uint64(len(w.tensors)), uint64(len(keys))}
	if err := binary.Write(bw, binary.LittleEndian, hdr); err != nil {
		return int64(cw.n), err
	}
	for _, k := range keys {
		if err := putString(bw, k); err != nil {
			return int64(cw.n), err
		}
		if err := putValue(bw, kv[k]); err != nil {
			return int64(cw.n), err
		}
	}
	var off, total uint64
	for i := range w.tensors {
		t := &w.tensors[i]
		t.info.Offset = off
		off += pad(t.size, align)
		total += t.size
		if err := putString(bw, t.info.Name); err != nil {
			return int64(cw.n), err
		}
		if err := binary.Write(bw, binary.LittleEndian, uint32(len(t.info.Shape))); err != nil {
			return int64(cw.n), err
		}
		if err := binary.Write(bw, binary.LittleEndian, t.info.Shape); err != nil {
			return int64(cw.n), err
		}
		if err := binary.Write(bw, binary.LittleEndian, uint32(t.info.Type)); err != nil {
			return int64(cw.n), err
		}
		if err := binary.Write(bw, binary.LittleEndian, t.info.Offset); err != nil {
			return int64(cw.n), err
		}
	}
	zeros := make([]byte, align)
	padTo := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err := bw.Write(zeros[:pad(cw.n, align)-cw.n])
		return err
	}
	if err := padTo(); err != nil {
		return int64(cw.n), err
	}
	var done uint64
	for i := range w.tensors {
		t := &w.tensors[i]
		if err := bw.Flush(); err != nil {
			return int64(cw.n), err
		}
		if t.gen != nil {
			lw := &limitWriter{w: bw, left: t.size}
			if err := t.gen(lw); err != nil {
				return int64(cw.n), fmt.Errorf("gguf: writing tensor %q: %w", t.info.Name, err)
			}
			if lw.left != 0 {
				return int64(cw.n), fmt.Errorf("gguf: tensor %q: write function produced %d of %d bytes", t.info.Name, t.size-lw.left, t.size)
			}
		} else if _, err := bw.Write(t.data); err != nil {
			return int64(cw.n), err
		}
		if err := bw.Flush(); err != nil {
			return int64(cw.n), err
		}
		done += t.size
		if w.Progress != nil {
			w.Progress(int64(done), int64(total))
		}
		// pad every tensor, the last included: gguf_init_from_file reads the
		// data section as the sum of the padded sizes.
		if err := padTo(); err != nil {
			return int64(cw.n), err
		}
	}
	if err := bw.Flush(); err != nil {
		return int64(cw.n), err
	}
	return int64(cw.n), nil
}

// limitWriter passes at most left bytes through and fails on more.
type limitWriter struct {
	w    io.Writer
	left uint64
}

var errTooMuch = errors.New("write function produced more bytes than the tensor holds")

func (l *limitWriter) Write(p []byte) (int, error) {
	if uint64(len(p)) > l.left {
		return 0, errTooMuch
	}
	n, err := l.w.Write(p)
	l.left -= uint64(n)
	return n, err
}

// WriteFile writes the file atomically (internal/safefile): a temporary
// file ".NAME.tmp-PID-RANDOM" in path's directory, fsync, rename over path,
// fsync of the directory. On error path is left untouched and the temporary
// file is removed; so it is when SIGINT or SIGTERM arrives while the file is
// written (the signal then takes its course; see SetSignalCleanup).
// Temporary files of this naming left beside path by a process that is gone
// (killed with SIGKILL, a power cut) are removed first. A path that is a
// directory, or lies in a folder that does not exist, is refused before
// anything is written.
func (w *Writer) WriteFile(path string) error {
	if w.err != nil {
		return w.err
	}
	return safefile.WriteFunc(path, 0o644, func(out io.Writer) error {
		_, err := w.WriteTo(out)
		return err
	})
}

// SetSignalCleanup sets whether WriteFile (and every other atomic write of
// this program, internal/safefile), when SIGINT or SIGTERM arrives during a
// write, removes its temporary file and lets the signal end the process
// (the default: right for one-shot writers such as `model init` and
// `export`). A program that handles these signals itself in order to finish
// its work (`empo2 train`: finish the step, checkpoint, exit 0) turns it
// off, so that a write in progress completes instead of losing its file.
func SetSignalCleanup(on bool) { safefile.SetSignalCleanup(on) }
