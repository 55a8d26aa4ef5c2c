package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
)

// File is an open GGUF file: its header, metadata and tensor infos are read
// by Open; tensor data is read on demand.
//
// A model split into several files (llama.cpp's gguf-split convention:
// <prefix>-00001-of-0000N.gguf … <prefix>-0000N-of-0000N.gguf, each with the
// keys split.no, split.count and split.tensors.count, the metadata in the
// first) is one File when Open is given the first file: Tensors lists the
// tensors of every split in split order, ReadTensor* read each from its own
// file, the metadata is the first file's without the split.* keys (so a
// writer copying it writes one unsplit model), Splits names the files and
// Size is their total.
type File struct {
	Path       string // the file opened (the first split)
	Version    uint32
	Alignment  uint64
	DataOffset uint64 // absolute offset of the data section (of the first split)
	Tensors    []TensorInfo
	Size       int64    // file size in bytes (of all splits)
	Splits     []string // the split files in order; nil for an unsplit file

	keys    []string
	kv      map[string]any
	types   map[string]ValueType // value type (element type for arrays)
	tensors map[string]int
	part    []int       // split of each tensor (index into parts); nil: all in the first
	parts   []*filePart // the other splits' data

	mu     sync.Mutex
	ra     io.ReaderAt // nil once closed
	closer io.Closer   // the os.File for Open, nil for OpenReader
}

// filePart is the data of one further split of a File.
type filePart struct {
	ra         io.ReaderAt
	closer     io.Closer
	dataOffset uint64
}

// maxPrealloc bounds the capacity reserved up front for an array read from
// the file; longer arrays grow by append as their elements are actually read.
const maxPrealloc = 1 << 16

// MaxStringLen is the longest metadata string (key or value) the reader
// accepts; real files hold names, tokens and templates of a few KB at most.
const MaxStringLen = 256 << 20

type reader struct {
	r    *bufio.Reader
	pos  uint64
	size uint64
	buf  [8]byte
}

func (r *reader) remaining() uint64 {
	if r.pos > r.size {
		return 0
	}
	return r.size - r.pos
}

func (r *reader) read(n int, what string) ([]byte, error) {
	if uint64(n) > r.remaining() {
		return nil, fmt.Errorf("%w: reading %s at offset %d", ErrTruncated, what, r.pos)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, fmt.Errorf("%w: reading %s at offset %d: %v", ErrTruncated, what, r.pos, err)
	}
	r.pos += uint64(n)
	return b, nil
}

func (r *reader) u8(what string) (uint8, error) {
	b, err := r.read(1, what)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}
func (r *reader) u16(what string) (uint16, error) {
	b, err := r.read(2, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}
func (r *reader) u32(what string) (uint32, error) {
	b, err := r.read(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}
func (r *reader) u64(what string) (uint64, error) {
	b, err := r.read(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *reader) str(what string) (string, error) {
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > r.remaining() {
		return "", fmt.Errorf("%w: %s length %d exceeds the %d bytes left at offset %d", ErrTruncated, what, n, r.remaining(), r.pos)
	}
	if n > MaxStringLen {
		return "", fmt.Errorf("%w: %s length %d exceeds %d", ErrCorrupt, what, n, MaxStringLen)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return "", fmt.Errorf("%w: reading %s at offset %d: %v", ErrTruncated, what, r.pos, err)
	}
	r.pos += n
	return string(b), nil
}

// scalar reads one value of a fixed-size or string type.
func (r *reader) scalar(t ValueType, what string) (any, error) {
	switch t {
	case ValUint8:
		return r.u8(what)
	case ValInt8:
		v, err := r.u8(what)
		return int8(v), err
	case ValUint16:
		return r.u16(what)
	case ValInt16:
		v, err := r.u16(what)
		return int16(v), err
	case ValUint32:
		return r.u32(what)
	case ValInt32:
		v, err := r.u32(what)
		return int32(v), err
	case ValFloat32:
		v, err := r.u32(what)
		return math.Float32frombits(v), err
	case ValBool:
		v, err := r.u8(what)
		if err != nil {
			return nil, err
		}
		if v > 1 {
			return nil, fmt.Errorf("%w: %s: bool value %d", ErrCorrupt, what, v)
		}
		return v == 1, nil
	case ValString:
		return r.str(what)
	case ValUint64:
		return r.u64(what)
	case ValInt64:
		v, err := r.u64(what)
		return int64(v), err
	case ValFloat64:
		v, err := r.u64(what)
		return math.Float64frombits(v), err
	}
	return nil, fmt.Errorf("%w: %s has value type %d", ErrUnsupportedType, what, uint32(t))
}

func readArray[T any](r *reader, n uint64, t ValueType, what string) ([]T, error) {
	out := make([]T, 0, min(n, maxPrealloc))
	for i := uint64(0); i < n; i++ {
		v, err := r.scalar(t, what)
		if err != nil {
			return nil, err
		}
		out = append(out, v.(T))
	}
	return out, nil
}

func (r *reader) array(what string) (any, ValueType, error) {
	et, err := r.u32(what + " element type")
	if err != nil {
		return nil, 0, err
	}
	t := ValueType(et)
	n, err := r.u64(what + " length")
	if err != nil {
		return nil, 0, err
	}
	minSize := t.scalarSize()
	if t == ValString {
		minSize = 8
	}
	if t == ValArray {
		return nil, 0, fmt.Errorf("%w: %s is a nested array", ErrUnsupportedType, what)
	}
	if minSize == 0 {
		return nil, 0, fmt.Errorf("%w: %s has element type %d", ErrUnsupportedType, what, et)
	}
	if n > r.remaining()/minSize {
		return nil, 0, fmt.Errorf("%w: %s: %d elements of %s cannot fit in the %d bytes left", ErrTruncated, what, n, t, r.remaining())
	}
	var v any
	switch t {
	case ValUint8:
		v, err = readArray[uint8](r, n, t, what)
	case ValInt8:
		v, err = readArray[int8](r, n, t, what)
	case ValUint16:
		v, err = readArray[uint16](r, n, t, what)
	case ValInt16:
		v, err = readArray[int16](r, n, t, what)
	case ValUint32:
		v, err = readArray[uint32](r, n, t, what)
	case ValInt32:
		v, err = readArray[int32](r, n, t, what)
	case ValFloat32:
		v, err = readArray[float32](r, n, t, what)
	case ValBool:
		v, err = readArray[bool](r, n, t, what)
	case ValString:
		v, err = readArray[string](r, n, t, what)
	case ValUint64:
		v, err = readArray[uint64](r, n, t, what)
	case ValInt64:
		v, err = readArray[int64](r, n, t, what)
	case ValFloat64:
		v, err = readArray[float64](r, n, t, what)
	}
	return v, t, err
}

// Open reads the header, metadata and tensor infos of the GGUF file at path
// (of every split when path is the first file of a split model, see File).
// The files stay open for ReadTensor*; call Close.
func Open(path string) (*File, error) {
	f, err := openOne(path)
	if err != nil {
		return nil, err
	}
	if err := f.openSplits(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func openOne(path string) (*File, error) {
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	st, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		osf.Close()
		return nil, fmt.Errorf("%s: %w: not a regular file", path, ErrNotGGUF)
	}
	f, err := parse(osf, st.Size(), path)
	if err != nil {
		osf.Close()
		return nil, err
	}
	f.closer = osf
	return f, nil
}

// OpenReader parses a GGUF held by r (size bytes), e.g. a bytes.Reader.
// Close is a no-op for it. A split of a split model is refused (ErrSplit):
// its other files can only be found by path (Open).
func OpenReader(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size", ErrCorrupt)
	}
	f, err := parse(r, size, "gguf reader")
	if err != nil {
		return nil, err
	}
	if n, _ := splitKeys(f); n > 1 {
		return nil, fmt.Errorf("%w: one split of %d: open the first split's path with Open", ErrSplit, n)
	}
	return f, nil
}

func parse(ra io.ReaderAt, fsize int64, path string) (*File, error) {
	size := uint64(fsize)
	r := &reader{r: bufio.NewReaderSize(io.NewSectionReader(ra, 0, fsize), 1<<16), size: size}
	f := &File{
		Path:      path,
		Size:      fsize,
		kv:        map[string]any{},
		types:     map[string]ValueType{},
		tensors:   map[string]int{},
		ra:        ra,
		Alignment: DefaultAlignment,
	}
	wrap := func(err error) error { return fmt.Errorf("%s: %w", path, err) }

	magic, err := r.read(4, "magic")
	if err != nil {
		return nil, wrap(fmt.Errorf("%w (%d bytes)", ErrNotGGUF, size))
	}
	if string(magic) != Magic {
		return nil, wrap(fmt.Errorf("%w: magic %q", ErrNotGGUF, magic))
	}
	if f.Version, err = r.u32("version"); err != nil {
		return nil, wrap(err)
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, wrap(fmt.Errorf("%w: GGUF version %d (want 2 or 3)", ErrUnsupportedType, f.Version))
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, wrap(err)
	}
	nKV, err := r.u64("kv count")
	if err != nil {
		return nil, wrap(err)
	}
	// each kv needs at least 8 (key len) + 4 (type) + 1 bytes; each tensor info
	// at least 8 + 4 + 4 + 8.
	if nKV > r.remaining()/13 {
		return nil, wrap(fmt.Errorf("%w: %d metadata entries cannot fit in %d bytes", ErrTruncated, nKV, size))
	}
	if nTensors > r.remaining()/24 {
		return nil, wrap(fmt.Errorf("%w: %d tensors cannot fit in %d bytes", ErrTruncated, nTensors, size))
	}
	f.keys = make([]string, 0, min(nKV, maxPrealloc))
	for i := uint64(0); i < nKV; i++ {
		key, err := r.str(fmt.Sprintf("key #%d", i))
		if err != nil {
			return nil, wrap(err)
		}
		if _, dup := f.kv[key]; dup {
			return nil, wrap(fmt.Errorf("%w: duplicate key %q", ErrCorrupt, key))
		}
		vt, err := r.u32("type of " + key)
		if err != nil {
			return nil, wrap(err)
		}
		var v any
		t := ValueType(vt)
		if t == ValArray {
			v, t, err = r.array(key)
		} else {
			v, err = r.scalar(t, key)
		}
		if err != nil {
			return nil, wrap(err)
		}
		f.keys = append(f.keys, key)
		f.kv[key] = v
		f.types[key] = t
	}
	if v, ok := f.kv[KeyAlignment]; ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, wrap(fmt.Errorf("%w: %s = %v (want a power of two u32)", ErrCorrupt, KeyAlignment, v))
		}
		f.Alignment = uint64(a)
	}

	f.Tensors = make([]TensorInfo, 0, min(nTensors, maxPrealloc))
	sizes := make([]uint64, 0, min(nTensors, maxPrealloc))
	for i := uint64(0); i < nTensors; i++ {
		name, err := r.str(fmt.Sprintf("tensor #%d name", i))
		if err != nil {
			return nil, wrap(err)
		}
		if _, dup := f.tensors[name]; dup {
			return nil, wrap(fmt.Errorf("%w: duplicate tensor %q", ErrCorrupt, name))
		}
		nd, err := r.u32("dims of " + name)
		if err != nil {
			return nil, wrap(err)
		}
		if nd > MaxDims {
			return nil, wrap(fmt.Errorf("%w: tensor %q has %d dims (max %d)", ErrCorrupt, name, nd, MaxDims))
		}
		shape := make([]uint64, nd)
		for d := range shape {
			if shape[d], err = r.u64("shape of " + name); err != nil {
				return nil, wrap(err)
			}
		}
		tt, err := r.u32("type of " + name)
		if err != nil {
			return nil, wrap(err)
		}
		off, err := r.u64("offset of " + name)
		if err != nil {
			return nil, wrap(err)
		}
		sz, err := tensorSize(name, shape, GGMLType(tt))
		if err != nil {
			return nil, wrap(err)
		}
		if off%f.Alignment != 0 {
			return nil, wrap(fmt.Errorf("%w: tensor %q offset %d not aligned to %d", ErrCorrupt, name, off, f.Alignment))
		}
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, TensorInfo{Name: name, Shape: shape, Type: GGMLType(tt), Offset: off})
		sizes = append(sizes, sz)
	}
	f.DataOffset = pad(r.pos, f.Alignment)
	if nTensors > 0 && f.DataOffset > size {
		return nil, wrap(fmt.Errorf("%w: data section starts at %d, beyond the %d-byte file", ErrTruncated, f.DataOffset, size))
	}
	dataSize := size - min(size, f.DataOffset)
	for i, ti := range f.Tensors {
		if ti.Offset > dataSize || sizes[i] > dataSize-ti.Offset {
			return nil, wrap(fmt.Errorf("%w: tensor %q (%d bytes at data offset %d) extends past the end of the file", ErrTruncated, ti.Name, sizes[i], ti.Offset))
		}
	}
	return f, nil
}

func pad(x, a uint64) uint64 { return (x + a - 1) / a * a }

// Close closes the file (every split); it is safe to call more than once.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ra == nil {
		return nil
	}
	f.ra = nil
	var err error
	for _, p := range f.parts {
		if p.closer != nil {
			err = errors.Join(err, p.closer.Close())
		}
	}
	if f.closer != nil {
		err = errors.Join(err, f.closer.Close())
	}
	return err
}

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string { return append([]string(nil), f.keys...) }

// Get returns the value of key: a Go scalar (uint8 … int64, float32, float64,
// bool, string) or, for arrays, a typed slice ([]string, []int32, []float32, …).
func (f *File) Get(key string) (any, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// ValueType returns the GGUF type of key's value and, for arrays, whether it
// is an array (the type is then the element type).
func (f *File) ValueType(key string) (t ValueType, isArray bool, ok bool) {
	t, ok = f.types[key]
	if !ok {
		return 0, false, false
	}
	_, isArray = f.ArrayLen(key)
	return t, isArray, true
}

// String returns a string value.
func (f *File) String(key string) (string, bool) { v, ok := f.kv[key].(string); return v, ok }

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) { v, ok := f.kv[key].(bool); return v, ok }

// Float32 returns a float32 value (a float64 value is converted).
func (f *File) Float32(key string) (float32, bool) {
	switch v := f.kv[key].(type) {
	case float32:
		return v, true
	case float64:
		return float32(v), true
	}
	return 0, false
}

// Uint32 returns an unsigned or signed integer value that fits in a uint32.
func (f *File) Uint32(key string) (uint32, bool) {
	v, ok := f.Int64(key)
	if !ok || v < 0 || v > math.MaxUint32 {
		return 0, false
	}
	return uint32(v), true
}

// Uint64 returns a non-negative integer value.
func (f *File) Uint64(key string) (uint64, bool) {
	if v, ok := f.kv[key].(uint64); ok {
		return v, true
	}
	v, ok := f.Int64(key)
	if !ok || v < 0 {
		return 0, false
	}
	return uint64(v), true
}

// Int64 returns any integer value that fits in an int64.
func (f *File) Int64(key string) (int64, bool) {
	switch v := f.kv[key].(type) {
	case uint8:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), true
		}
	}
	return 0, false
}

// Strings returns a string-array value.
func (f *File) Strings(key string) ([]string, bool) { v, ok := f.kv[key].([]string); return v, ok }

// ArrayLen returns the length of an array value.
func (f *File) ArrayLen(key string) (int, bool) {
	switch v := f.kv[key].(type) {
	case []uint8:
		return len(v), true
	case []int8:
		return len(v), true
	case []uint16:
		return len(v), true
	case []int16:
		return len(v), true
	case []uint32:
		return len(v), true
	case []int32:
		return len(v), true
	case []float32:
		return len(v), true
	case []bool:
		return len(v), true
	case []string:
		return len(v), true
	case []uint64:
		return len(v), true
	case []int64:
		return len(v), true
	case []float64:
		return len(v), true
	}
	return 0, false
}

// Tensor returns the info of the tensor called name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// ErrNoTensor is returned for a tensor name the file does not have.
var ErrNoTensor = errors.New("gguf: no such tensor")

// ReadTensorRaw returns the tensor's bytes as stored.
func (f *File) ReadTensorRaw(name string) ([]byte, error) {
	ti, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q in %s", ErrNoTensor, name, f.Path)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ra == nil {
		return nil, fmt.Errorf("gguf: %s: %w", f.Path, os.ErrClosed)
	}
	ra, off := f.ra, f.DataOffset
	if f.part != nil {
		if k := f.part[f.tensors[name]]; k > 0 {
			ra, off = f.parts[k-1].ra, f.parts[k-1].dataOffset
		}
	}
	buf := make([]byte, ti.Size())
	if _, err := ra.ReadAt(buf, int64(off+ti.Offset)); err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %v", ErrTruncated, name, err)
	}
	return buf, nil
}

// ReadTensorF32 returns the tensor's elements as float32: F32 as stored, F16
// and BF16 converted; other types give ErrUnsupportedType.
func (f *File) ReadTensorF32(name string) ([]float32, error) {
	ti, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q in %s", ErrNoTensor, name, f.Path)
	}
	if ti.Type != TypeF32 && ti.Type != TypeF16 && ti.Type != TypeBF16 {
		return nil, fmt.Errorf("%w: tensor %q is %s; ReadTensorF32 reads F32, F16, BF16", ErrUnsupportedType, name, ti.Type)
	}
	raw, err := f.ReadTensorRaw(name)
	if err != nil {
		return nil, err
	}
	n := ti.NumElements()
	out := make([]float32, n)
	switch ti.Type {
	case TypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case TypeF16:
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case TypeBF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	}
	return out, nil
}
