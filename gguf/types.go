package gguf

import (
	"errors"
	"fmt"
)

// Sentinel errors; the errors returned by this package wrap one of them.
var (
	ErrNotGGUF         = errors.New("gguf: not a GGUF file")
	ErrTruncated       = errors.New("gguf: file truncated")
	ErrUnsupportedType = errors.New("gguf: unsupported type")
	ErrCorrupt         = errors.New("gguf: corrupt file")
)

// Magic is the four bytes a GGUF file starts with.
const Magic = "GGUF"

// Version is the GGUF version this package writes. Versions 2 and 3 are read
// (they share the layout); version 1 used 32-bit counts and is rejected.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that overrides the alignment.
const KeyAlignment = "general.alignment"

// MaxDims is ggml's maximum number of tensor dimensions (GGML_MAX_DIMS).
const MaxDims = 4

// GGMLType is a ggml tensor element type (enum ggml_type).
type GGMLType uint32

// ggml type ids, as in ggml.h. Ids 4, 5 and 31–33, 36–38 were removed from ggml.
const (
	TypeF32     GGMLType = 0
	TypeF16     GGMLType = 1
	TypeQ4_0    GGMLType = 2
	TypeQ4_1    GGMLType = 3
	TypeQ5_0    GGMLType = 6
	TypeQ5_1    GGMLType = 7
	TypeQ8_0    GGMLType = 8
	TypeQ8_1    GGMLType = 9
	TypeQ2_K    GGMLType = 10
	TypeQ3_K    GGMLType = 11
	TypeQ4_K    GGMLType = 12
	TypeQ5_K    GGMLType = 13
	TypeQ6_K    GGMLType = 14
	TypeQ8_K    GGMLType = 15
	TypeIQ2_XXS GGMLType = 16
	TypeIQ2_XS  GGMLType = 17
	TypeIQ3_XXS GGMLType = 18
	TypeIQ1_S   GGMLType = 19
	TypeIQ4_NL  GGMLType = 20
	TypeIQ3_S   GGMLType = 21
	TypeIQ2_S   GGMLType = 22
	TypeIQ4_XS  GGMLType = 23
	TypeI8      GGMLType = 24
	TypeI16     GGMLType = 25
	TypeI32     GGMLType = 26
	TypeI64     GGMLType = 27
	TypeF64     GGMLType = 28
	TypeIQ1_M   GGMLType = 29
	TypeBF16    GGMLType = 30
	TypeTQ1_0   GGMLType = 34
	TypeTQ2_0   GGMLType = 35
	TypeMXFP4   GGMLType = 39
)

type typeTraits struct {
	name      string
	blockSize uint64 // elements per block
	typeSize  uint64 // bytes per block
}

// traits mirrors ggml's type_traits (blck_size, type_size).
var traits = map[GGMLType]typeTraits{
	TypeF32:     {"F32", 1, 4},
	TypeF16:     {"F16", 1, 2},
	TypeQ4_0:    {"Q4_0", 32, 18},
	TypeQ4_1:    {"Q4_1", 32, 20},
	TypeQ5_0:    {"Q5_0", 32, 22},
	TypeQ5_1:    {"Q5_1", 32, 24},
	TypeQ8_0:    {"Q8_0", 32, 34},
	TypeQ8_1:    {"Q8_1", 32, 36},
	TypeQ2_K:    {"Q2_K", 256, 84},
	TypeQ3_K:    {"Q3_K", 256, 110},
	TypeQ4_K:    {"Q4_K", 256, 144},
	TypeQ5_K:    {"Q5_K", 256, 176},
	TypeQ6_K:    {"Q6_K", 256, 210},
	TypeQ8_K:    {"Q8_K", 256, 292},
	TypeIQ2_XXS: {"IQ2_XXS", 256, 66},
	TypeIQ2_XS:  {"IQ2_XS", 256, 74},
	TypeIQ3_XXS: {"IQ3_XXS", 256, 98},
	TypeIQ1_S:   {"IQ1_S", 256, 50},
	TypeIQ4_NL:  {"IQ4_NL", 32, 18},
	TypeIQ3_S:   {"IQ3_S", 256, 110},
	TypeIQ2_S:   {"IQ2_S", 256, 82},
	TypeIQ4_XS:  {"IQ4_XS", 256, 136},
	TypeI8:      {"I8", 1, 1},
	TypeI16:     {"I16", 1, 2},
	TypeI32:     {"I32", 1, 4},
	TypeI64:     {"I64", 1, 8},
	TypeF64:     {"F64", 1, 8},
	TypeIQ1_M:   {"IQ1_M", 256, 56},
	TypeBF16:    {"BF16", 1, 2},
	TypeTQ1_0:   {"TQ1_0", 256, 54},
	TypeTQ2_0:   {"TQ2_0", 256, 66},
	TypeMXFP4:   {"MXFP4", 32, 17},
}

// String returns ggml's name of the type ("F32", "Q4_K", ...).
func (t GGMLType) String() string {
	if tr, ok := traits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether t is a ggml type this package knows the size of.
func (t GGMLType) Known() bool { _, ok := traits[t]; return ok }

// BlockSize is the number of elements per quantization block (1 for plain types).
func (t GGMLType) BlockSize() uint64 { return traits[t].blockSize }

// TypeSize is the number of bytes per block.
func (t GGMLType) TypeSize() uint64 { return traits[t].typeSize }

// ParseGGMLType returns the type named s (as String prints it).
func ParseGGMLType(s string) (GGMLType, error) {
	for t, tr := range traits {
		if tr.name == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: ggml type %q", ErrUnsupportedType, s)
}

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name   string
	Shape  []uint64 // ggml order: ne0 (the contiguous dimension) first
	Type   GGMLType
	Offset uint64 // relative to the data section
}

// NumElements is the product of the shape (1 for a 0-dim tensor).
func (ti TensorInfo) NumElements() uint64 {
	n := uint64(1)
	for _, d := range ti.Shape {
		n *= d
	}
	return n
}

// Size is the tensor's data size in bytes.
func (ti TensorInfo) Size() uint64 {
	tr := traits[ti.Type]
	if tr.blockSize == 0 {
		return 0
	}
	return ti.NumElements() / tr.blockSize * tr.typeSize
}

// tensorSize validates shape and type and returns the data size, with
// overflow checks.
func tensorSize(name string, shape []uint64, t GGMLType) (uint64, error) {
	tr, ok := traits[t]
	if !ok {
		return 0, fmt.Errorf("%w: tensor %q has ggml type %d", ErrUnsupportedType, name, uint32(t))
	}
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("%w: tensor %q has %d dims (max %d)", ErrCorrupt, name, len(shape), MaxDims)
	}
	const limit = uint64(1) << 62
	n := uint64(1)
	for i, d := range shape {
		if d == 0 {
			// ggml allows empty tensors; size is 0.
			n = 0
			continue
		}
		if n != 0 && d > limit/n {
			return 0, fmt.Errorf("%w: tensor %q shape %v overflows", ErrCorrupt, name, shape)
		}
		if n != 0 {
			n *= d
		}
		if i == 0 && d%tr.blockSize != 0 {
			return 0, fmt.Errorf("%w: tensor %q: ne0=%d not a multiple of the %s block size %d", ErrCorrupt, name, d, tr.name, tr.blockSize)
		}
	}
	return n / tr.blockSize * tr.typeSize, nil
}

// ValueType is a GGUF metadata value type (enum gguf_type).
type ValueType uint32

// GGUF metadata value types.
const (
	ValUint8   ValueType = 0
	ValInt8    ValueType = 1
	ValUint16  ValueType = 2
	ValInt16   ValueType = 3
	ValUint32  ValueType = 4
	ValInt32   ValueType = 5
	ValFloat32 ValueType = 6
	ValBool    ValueType = 7
	ValString  ValueType = 8
	ValArray   ValueType = 9
	ValUint64  ValueType = 10
	ValInt64   ValueType = 11
	ValFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"}

func (v ValueType) String() string {
	if int(v) < len(valueTypeNames) {
		return valueTypeNames[v]
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(v))
}

// scalarSize is the encoded size of a fixed-size value type (0 for string/array/unknown).
func (v ValueType) scalarSize() uint64 {
	switch v {
	case ValUint8, ValInt8, ValBool:
		return 1
	case ValUint16, ValInt16:
		return 2
	case ValUint32, ValInt32, ValFloat32:
		return 4
	case ValUint64, ValInt64, ValFloat64:
		return 8
	}
	return 0
}

var fileTypeNames = map[uint32]string{
	0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0",
	8: "MOSTLY_Q5_0", 9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M",
	13: "MOSTLY_Q3_K_L", 14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M",
	18: "MOSTLY_Q6_K", 19: "MOSTLY_IQ2_XXS", 20: "MOSTLY_IQ2_XS", 21: "MOSTLY_Q2_K_S", 22: "MOSTLY_IQ3_XS",
	23: "MOSTLY_IQ3_XXS", 24: "MOSTLY_IQ1_S", 25: "MOSTLY_IQ4_NL", 26: "MOSTLY_IQ3_S", 27: "MOSTLY_IQ3_M",
	28: "MOSTLY_IQ2_S", 29: "MOSTLY_IQ2_M", 30: "MOSTLY_IQ4_XS", 31: "MOSTLY_IQ1_M", 32: "MOSTLY_BF16",
	36: "MOSTLY_TQ1_0", 37: "MOSTLY_TQ2_0", 38: "MOSTLY_MXFP4_MOE",
}

// FileTypeName names a general.file_type value (enum llama_ftype), e.g.
// 0 → "ALL_F32", 1 → "MOSTLY_F16".
func FileTypeName(ft uint32) string {
	if s, ok := fileTypeNames[ft]; ok {
		return s
	}
	return fmt.Sprintf("ftype(%d)", ft)
}
