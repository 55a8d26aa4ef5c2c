// Package tfevents writes and reads TensorBoard event files in pure Go: the
// TFRecord framing around tensorflow.Event protocol buffers, with the fields
// scalar summaries need. It is a leaf (the standard library and
// google.golang.org/protobuf/encoding/protowire; no cgo).
//
// A record is
//
//	uint64 length (little endian) · uint32 masked CRC32C of those 8 bytes ·
//	data · uint32 masked CRC32C of data
//
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 over the Castagnoli
// CRC. The data is an Event message: wall_time (field 1, double), step (2,
// int64), file_version (3, string; "brain.Event:2" in the first event of a
// file), summary (5, message Summary{ repeated Value value = 1 }, Value{ tag
// = 1 string, simple_value = 2 float }).
//
// runlog.go keeps a run directory's event file in step with its
// metrics.jsonl and eval.jsonl (see [OpenRun]).
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the first event's file_version.
const FileVersion = "brain.Event:2"

// ErrCorrupt: a record whose length or data fails its CRC, or an Event that
// does not decode.
var ErrCorrupt = errors.New("tfevents: corrupt record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC32C of b.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// Value is one scalar of a summary.
type Value struct {
	Tag   string
	Value float32
}

// Event is one event: the file-version header (FileVersion set) or a step's
// scalars (Values).
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string
	Values      []Value
}

// Event, Summary and Summary.Value field numbers.
const (
	fieldWallTime    protowire.Number = 1
	fieldStep        protowire.Number = 2
	fieldFileVersion protowire.Number = 3
	fieldSummary     protowire.Number = 5
	fieldValue       protowire.Number = 1 // Summary.value
	fieldTag         protowire.Number = 1 // Value.tag
	fieldSimpleValue protowire.Number = 2 // Value.simple_value
)

// Marshal encodes e as an Event message. Zero step and empty strings are
// left out, as proto3 encoders do; wall_time is always written.
func Marshal(e Event) []byte {
	var b []byte
	b = protowire.AppendTag(b, fieldWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(e.WallTime))
	if e.Step != 0 {
		b = protowire.AppendTag(b, fieldStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = protowire.AppendTag(b, fieldFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, e.FileVersion)
	}
	if len(e.Values) > 0 {
		var s []byte
		for _, v := range e.Values {
			var vb []byte
			vb = protowire.AppendTag(vb, fieldTag, protowire.BytesType)
			vb = protowire.AppendString(vb, v.Tag)
			vb = protowire.AppendTag(vb, fieldSimpleValue, protowire.Fixed32Type)
			vb = protowire.AppendFixed32(vb, math.Float32bits(v.Value))
			s = protowire.AppendTag(s, fieldValue, protowire.BytesType)
			s = protowire.AppendBytes(s, vb)
		}
		b = protowire.AppendTag(b, fieldSummary, protowire.BytesType)
		b = protowire.AppendBytes(b, s)
	}
	return b
}

// Unmarshal decodes an Event message; fields it does not know are skipped,
// and summary values without simple_value (images, histograms) are left out.
func Unmarshal(b []byte) (Event, error) {
	var e Event
	err := fields(b, func(num protowire.Number, typ protowire.Type, raw []byte, x uint64) error {
		switch {
		case num == fieldWallTime && typ == protowire.Fixed64Type:
			e.WallTime = math.Float64frombits(x)
		case num == fieldStep && typ == protowire.VarintType:
			e.Step = int64(x)
		case num == fieldFileVersion && typ == protowire.BytesType:
			e.FileVersion = string(raw)
		case num == fieldSummary && typ == protowire.BytesType:
			return fields(raw, func(num protowire.Number, typ protowire.Type, raw []byte, _ uint64) error {
				if num != fieldValue || typ != protowire.BytesType {
					return nil
				}
				var v Value
				simple := false
				err := fields(raw, func(num protowire.Number, typ protowire.Type, raw []byte, x uint64) error {
					switch {
					case num == fieldTag && typ == protowire.BytesType:
						v.Tag = string(raw)
					case num == fieldSimpleValue && typ == protowire.Fixed32Type:
						v.Value, simple = math.Float32frombits(uint32(x)), true
					}
					return nil
				})
				if err == nil && simple {
					e.Values = append(e.Values, v)
				}
				return err
			})
		}
		return nil
	})
	return e, err
}

// fields calls f for each field of message b: its number, wire type, and
// its bytes (BytesType) or number (varint, fixed32, fixed64).
func fields(b []byte, f func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorrupt, protowire.ParseError(n))
		}
		b = b[n:]
		var raw []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			x = uint64(v)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrCorrupt, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, raw, x); err != nil {
			return err
		}
	}
	return nil
}

// AppendRecord appends data framed as one TFRecord to dst.
func AppendRecord(dst, data []byte) []byte {
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(len(data)))
	dst = append(dst, hdr[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(hdr[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Writer writes events as records. Each Write is one write call on the
// underlying writer (a whole record), so an appended file holds whole
// records unless the process dies inside that call.
type Writer struct{ w io.Writer }

// NewWriter writes records to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes e as one record.
func (w *Writer) Write(e Event) error {
	_, err := w.w.Write(AppendRecord(nil, Marshal(e)))
	return err
}

// maxRecord bounds a record's length: an event of scalars is a few KB, so
// a larger length is damage.
const maxRecord = 64 << 20

// Reader reads records, checking both CRCs of each.
type Reader struct{ r io.Reader }

// NewReader reads records from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next returns the next record's data: io.EOF at a clean end,
// io.ErrUnexpectedEOF for a record cut short (a writer killed mid-record),
// ErrCorrupt for a CRC that does not match.
func (r *Reader) Next() ([]byte, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return nil, err
	}
	if got, want := binary.LittleEndian.Uint32(hdr[8:]), MaskedCRC(hdr[:8]); got != want {
		return nil, fmt.Errorf("%w: length CRC %08x, want %08x", ErrCorrupt, got, want)
	}
	n := binary.LittleEndian.Uint64(hdr[:8])
	if n > maxRecord {
		return nil, fmt.Errorf("%w: record length %d", ErrCorrupt, n)
	}
	data := make([]byte, n+4)
	if _, err := io.ReadFull(r.r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if got, want := binary.LittleEndian.Uint32(data[n:]), MaskedCRC(data[:n]); got != want {
		return nil, fmt.Errorf("%w: data CRC %08x, want %08x", ErrCorrupt, got, want)
	}
	return data[:n], nil
}

// ReadEvents reads every event of r, checking every CRC. The events read
// before an error are returned with it.
func ReadEvents(r io.Reader) ([]Event, error) {
	rd := NewReader(r)
	var out []Event
	for {
		b, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("record %d: %w", len(out)+1, err)
		}
		e, err := Unmarshal(b)
		if err != nil {
			return out, fmt.Errorf("record %d: %w", len(out)+1, err)
		}
		out = append(out, e)
	}
}
