// Package gguf reads and writes GGUF v3 files (the llama.cpp/ggml model
// format) in pure Go: header, ordered metadata (key/value pairs), tensor
// descriptors and tensor data.
//
// Layout (little-endian): magic "GGUF", version u32, tensor count u64, kv count
// u64, the key/value pairs, the tensor infos (name, dims, ggml type, offset
// relative to the data section), zero padding up to the alignment
// (general.alignment, default 32), then the data section, in which every
// tensor starts at a multiple of the alignment.
//
// The reader never trusts a length read from the file: every string, array,
// count and tensor extent is checked against the file size before anything is
// allocated, so a truncated, corrupt or foreign file gives an error (ErrNotGGUF,
// ErrTruncated, ErrCorrupt or ErrUnsupportedType, wrapped with context), never a
// panic or a huge allocation.
//
// The writer lays out tensors exactly as llama.cpp's gguf_init_from_file
// expects (in order, each padded to the alignment) and writes atomically: a
// temporary file in the destination directory, fsync, rename.
package gguf
