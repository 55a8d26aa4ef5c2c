// Package ggmlref wraps ggml's own GGUF implementation (gguf.cpp from the
// pinned ollama module) through cgo, as the reference the pure-Go gguf
// package is tested against: files written by one must read back identically
// with the other.
package ggmlref

/*
#cgo CPPFLAGS: -I${SRCDIR}/../../../third_party/ollama/ml/backend/ggml/ggml/include
#include <stdlib.h>
#include "ggml.h"
#include "gguf.h"

static struct gguf_context * ref_open(const char * path, struct ggml_context ** ctx) {
	struct gguf_init_params p = { .no_alloc = false, .ctx = ctx };
	return gguf_init_from_file(path, p);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"
)

// gguf_type values.
const (
	tU8, tI8, tU16, tI16, tU32, tI32, tF32, tBool, tStr, tArr, tU64, tI64, tF64 = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
)

// KV is one metadata pair; Value uses the same Go types as gguf.File.Get.
type KV struct {
	Key   string
	Value any
}

// Tensor is one tensor with its data.
type Tensor struct {
	Name   string
	Type   uint32
	Offset uint64
	Shape  []uint64 // ne0 first, trailing 1s trimmed to the file's n_dims is not known to ggml: all 4 dims
	Data   []byte
}

// File is what ggml read.
type File struct {
	Version    uint32
	Alignment  uint64
	DataOffset uint64
	KVs        []KV
	Tensors    []Tensor
}

// ErrRejected is returned when ggml refuses a file.
var ErrRejected = errors.New("ggml's gguf_init_from_file rejected the file")

func carr[T any](p unsafe.Pointer, n int) []T {
	if n == 0 {
		return []T{}
	}
	return append([]T(nil), unsafe.Slice((*T)(p), n)...)
}

// Read opens path with gguf_init_from_file (data loaded, so sizes and
// offsets are fully checked by ggml).
func Read(path string) (*File, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var gctx *C.struct_ggml_context
	ctx := C.ref_open(cp, &gctx)
	if ctx == nil {
		return nil, fmt.Errorf("%w: %s", ErrRejected, path)
	}
	defer C.gguf_free(ctx)
	defer C.ggml_free(gctx)
	f := &File{
		Version:    uint32(C.gguf_get_version(ctx)),
		Alignment:  uint64(C.gguf_get_alignment(ctx)),
		DataOffset: uint64(C.gguf_get_data_offset(ctx)),
	}
	for i := C.int64_t(0); i < C.gguf_get_n_kv(ctx); i++ {
		key := C.GoString(C.gguf_get_key(ctx, i))
		var v any
		switch C.gguf_get_kv_type(ctx, i) {
		case tU8:
			v = uint8(C.gguf_get_val_u8(ctx, i))
		case tI8:
			v = int8(C.gguf_get_val_i8(ctx, i))
		case tU16:
			v = uint16(C.gguf_get_val_u16(ctx, i))
		case tI16:
			v = int16(C.gguf_get_val_i16(ctx, i))
		case tU32:
			v = uint32(C.gguf_get_val_u32(ctx, i))
		case tI32:
			v = int32(C.gguf_get_val_i32(ctx, i))
		case tF32:
			v = float32(C.gguf_get_val_f32(ctx, i))
		case tBool:
			v = bool(C.gguf_get_val_bool(ctx, i))
		case tStr:
			v = C.GoString(C.gguf_get_val_str(ctx, i))
		case tU64:
			v = uint64(C.gguf_get_val_u64(ctx, i))
		case tI64:
			v = int64(C.gguf_get_val_i64(ctx, i))
		case tF64:
			v = float64(C.gguf_get_val_f64(ctx, i))
		case tArr:
			n := int(C.gguf_get_arr_n(ctx, i))
			at := C.gguf_get_arr_type(ctx, i)
			if at == tStr {
				s := make([]string, n)
				for j := range s {
					s[j] = C.GoString(C.gguf_get_arr_str(ctx, i, C.size_t(j)))
				}
				v = s
				break
			}
			var p unsafe.Pointer
			if n > 0 {
				p = unsafe.Pointer(C.gguf_get_arr_data(ctx, i))
			}
			switch at {
			case tU8:
				v = carr[uint8](p, n)
			case tI8:
				v = carr[int8](p, n)
			case tU16:
				v = carr[uint16](p, n)
			case tI16:
				v = carr[int16](p, n)
			case tU32:
				v = carr[uint32](p, n)
			case tI32:
				v = carr[int32](p, n)
			case tF32:
				v = carr[float32](p, n)
			case tBool:
				b := carr[uint8](p, n)
				bb := make([]bool, n)
				for j := range b {
					bb[j] = b[j] != 0
				}
				v = bb
			case tU64:
				v = carr[uint64](p, n)
			case tI64:
				v = carr[int64](p, n)
			case tF64:
				v = carr[float64](p, n)
			default:
				return nil, fmt.Errorf("ggmlref: key %s: array type %d", key, at)
			}
		default:
			return nil, fmt.Errorf("ggmlref: key %s: type %d", key, C.gguf_get_kv_type(ctx, i))
		}
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	for i := C.int64_t(0); i < C.gguf_get_n_tensors(ctx); i++ {
		name := C.gguf_get_tensor_name(ctx, i)
		t := C.ggml_get_tensor(gctx, name)
		if t == nil {
			return nil, fmt.Errorf("ggmlref: tensor %s not in the ggml context", C.GoString(name))
		}
		size := int(C.gguf_get_tensor_size(ctx, i))
		ti := Tensor{
			Name:   C.GoString(name),
			Type:   uint32(C.gguf_get_tensor_type(ctx, i)),
			Offset: uint64(C.gguf_get_tensor_offset(ctx, i)),
			Data:   C.GoBytes(t.data, C.int(size)),
		}
		for d := 0; d < 4; d++ {
			ti.Shape = append(ti.Shape, uint64(t.ne[d]))
		}
		f.Tensors = append(f.Tensors, ti)
	}
	return f, nil
}

// Write writes kvs and tensors (Shape with up to 4 dims) with ggml's
// gguf_write_to_file.
func Write(path string, kvs []KV, tensors []Tensor) error {
	ctx := C.gguf_init_empty()
	defer C.gguf_free(ctx)
	var frees []unsafe.Pointer
	defer func() {
		for _, p := range frees {
			C.free(p)
		}
	}()
	cstr := func(s string) *C.char {
		p := C.CString(s)
		frees = append(frees, unsafe.Pointer(p))
		return p
	}
	cbytes := func(b []byte) unsafe.Pointer {
		if len(b) == 0 {
			b = []byte{0}
		}
		p := C.CBytes(b)
		frees = append(frees, p)
		return p
	}
	arr := func(k *C.char, t C.enum_gguf_type, p unsafe.Pointer, n int) {
		C.gguf_set_arr_data(ctx, k, t, p, C.size_t(n))
	}
	for _, kv := range kvs {
		k := cstr(kv.Key)
		switch v := kv.Value.(type) {
		case uint8:
			C.gguf_set_val_u8(ctx, k, C.uint8_t(v))
		case int8:
			C.gguf_set_val_i8(ctx, k, C.int8_t(v))
		case uint16:
			C.gguf_set_val_u16(ctx, k, C.uint16_t(v))
		case int16:
			C.gguf_set_val_i16(ctx, k, C.int16_t(v))
		case uint32:
			C.gguf_set_val_u32(ctx, k, C.uint32_t(v))
		case int32:
			C.gguf_set_val_i32(ctx, k, C.int32_t(v))
		case float32:
			C.gguf_set_val_f32(ctx, k, C.float(v))
		case bool:
			C.gguf_set_val_bool(ctx, k, C.bool(v))
		case string:
			C.gguf_set_val_str(ctx, k, cstr(v))
		case uint64:
			C.gguf_set_val_u64(ctx, k, C.uint64_t(v))
		case int64:
			C.gguf_set_val_i64(ctx, k, C.int64_t(v))
		case float64:
			C.gguf_set_val_f64(ctx, k, C.double(v))
		case []string:
			// calloc: pointers stored into uninitialized C memory run the GC
			// write barrier on the garbage there (golang/go#19928)
			ptrs := C.calloc(C.size_t(max(len(v), 1)), C.size_t(unsafe.Sizeof(uintptr(0))))
			frees = append(frees, ptrs)
			ps := unsafe.Slice((**C.char)(ptrs), max(len(v), 1))
			for i, s := range v {
				ps[i] = cstr(s)
			}
			C.gguf_set_arr_str(ctx, k, (**C.char)(ptrs), C.size_t(len(v)))
		case []uint8:
			arr(k, tU8, cbytes(v), len(v))
		case []int8:
			arr(k, tI8, cbytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v))), len(v))
		case []bool:
			b := make([]byte, len(v))
			for i, x := range v {
				if x {
					b[i] = 1
				}
			}
			arr(k, tBool, cbytes(b), len(v))
		case []uint16:
			arr(k, tU16, cbytes(raw(v)), len(v))
		case []int16:
			arr(k, tI16, cbytes(raw(v)), len(v))
		case []uint32:
			arr(k, tU32, cbytes(raw(v)), len(v))
		case []int32:
			arr(k, tI32, cbytes(raw(v)), len(v))
		case []float32:
			arr(k, tF32, cbytes(raw(v)), len(v))
		case []uint64:
			arr(k, tU64, cbytes(raw(v)), len(v))
		case []int64:
			arr(k, tI64, cbytes(raw(v)), len(v))
		case []float64:
			arr(k, tF64, cbytes(raw(v)), len(v))
		default:
			return fmt.Errorf("ggmlref: key %s: Go type %T", kv.Key, kv.Value)
		}
	}
	params := C.struct_ggml_init_params{
		mem_size: C.size_t(C.ggml_tensor_overhead()) * C.size_t(len(tensors)+1),
		no_alloc: true,
	}
	gctx := C.ggml_init(params)
	defer C.ggml_free(gctx)
	for _, t := range tensors {
		var ne [4]C.int64_t
		for i := range ne {
			ne[i] = 1
		}
		for i, d := range t.Shape {
			ne[i] = C.int64_t(d)
		}
		gt := C.ggml_new_tensor(gctx, C.enum_ggml_type(t.Type), C.int(len(t.Shape)), &ne[0])
		C.ggml_set_name(gt, cstr(t.Name))
		gt.data = cbytes(t.Data)
		C.gguf_add_tensor(ctx, gt)
	}
	if !C.gguf_write_to_file(ctx, cstr(path), false) {
		return fmt.Errorf("ggmlref: gguf_write_to_file %s failed", path)
	}
	return nil
}

func raw[T any](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(z)))
}
