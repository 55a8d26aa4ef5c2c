package tfevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
)

// crc32c is the Castagnoli CRC computed bit by bit from its definition
// (reflected polynomial 0x82F63B78), independent of hash/crc32.
func crc32c(b []byte) uint32 {
	c := ^uint32(0)
	for _, x := range b {
		c ^= uint32(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0x82F63B78
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

// masked is TFRecord's mask, written out from the spec.
func masked(b []byte) uint32 {
	c := crc32c(b)
	return (c>>15 | c<<17) + 0xa282ead8
}

// record frames data from the spec: u64 length, masked CRC of the
// length's 8 bytes, data, masked CRC of data (all little endian).
func record(data []byte) []byte {
	l := make([]byte, 8)
	binary.LittleEndian.PutUint64(l, uint64(len(data)))
	out := append([]byte{}, l...)
	out = binary.LittleEndian.AppendUint32(out, masked(l))
	out = append(out, data...)
	return binary.LittleEndian.AppendUint32(out, masked(data))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestCRC32CCheckValue(t *testing.T) {
	// The CRC-32C check value (RFC 3720, CRC catalogue): "123456789".
	if got := crc32c([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("reference crc32c = %08x", got)
	}
	for _, s := range []string{"", "a", "123456789", "brain.Event:2"} {
		if got, want := MaskedCRC([]byte(s)), masked([]byte(s)); got != want {
			t.Errorf("MaskedCRC(%q) = %08x, want %08x", s, got, want)
		}
	}
}

// The two kinds of event this package writes, encoded by hand from the
// protobuf wire format: key = field<<3 | wire type; 1 = 64-bit, 0 =
// varint, 2 = length-delimited, 5 = 32-bit.
func TestGoldenBytes(t *testing.T) {
	header := cat(
		[]byte{0x09}, []byte{0, 0, 0, 0, 0, 0, 0xF8, 0x3F}, // wall_time = 1.5 (0x3FF8000000000000)
		[]byte{0x1A, 13}, []byte("brain.Event:2"), // file_version
	)
	value := cat([]byte{0x0A, 11}, []byte("train/score"), // tag
		[]byte{0x15}, []byte{0, 0, 0, 0x3F}) // simple_value = 0.5f (0x3F000000)
	value2 := cat([]byte{0x0A, 9}, []byte("update/kl"),
		[]byte{0x15}, []byte{0, 0, 0x80, 0xBF}) // -1.0f (0xBF800000)
	summary := cat([]byte{0x0A, byte(len(value))}, value, []byte{0x0A, byte(len(value2))}, value2)
	scalars := cat(
		[]byte{0x09}, []byte{0, 0, 0, 0, 0, 0, 0, 0x40}, // wall_time = 2.0
		[]byte{0x10, 0xAC, 0x02}, // step = 300 (varint: 0b10_0101100)
		[]byte{0x2A, byte(len(summary))}, summary,
	)
	if len(value) != 18 || len(summary) != 38 {
		t.Fatalf("hand encoding: value %d, summary %d bytes", len(value), len(summary))
	}
	want := cat(record(header), record(scalars))

	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Write(Event{WallTime: 1.5, FileVersion: FileVersion}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Event{WallTime: 2, Step: 300, Values: []Value{{"train/score", 0.5}, {"update/kl", -1}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("writer bytes\n% x\nwant\n% x", buf.Bytes(), want)
	}
	// Framing: the first record's 8-byte length is 24 (0x18).
	if !bytes.Equal(want[:8], []byte{24, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("length field % x", want[:8])
	}

	evs, err := ReadEvents(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].FileVersion != FileVersion || evs[0].WallTime != 1.5 ||
		evs[1].Step != 300 || evs[1].WallTime != 2 || len(evs[1].Values) != 2 ||
		evs[1].Values[0] != (Value{"train/score", 0.5}) || evs[1].Values[1] != (Value{"update/kl", -1}) {
		t.Fatalf("read back %+v", evs)
	}
}

func TestReaderChecksEveryCRC(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range 3 {
		if err := w.Write(Event{WallTime: float64(i), Step: int64(i + 1), Values: []Value{{"a/b", float32(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	good := buf.Bytes()
	n := len(good) / 3
	// Flip one bit anywhere: the length, either CRC, or the data.
	for _, at := range []int{0, 5, 8, 11, 12, 20, n - 1, n + 3, 2*n + 13} {
		bad := append([]byte{}, good...)
		bad[at] ^= 0x10
		_, err := ReadEvents(bytes.NewReader(bad))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("bit flipped at %d: err %v, want a CRC failure", at, err)
		}
	}
	// A record cut short (a writer killed mid-record): the records before it
	// and io.ErrUnexpectedEOF.
	evs, err := ReadEvents(bytes.NewReader(good[:len(good)-3]))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(evs) != 2 {
		t.Fatalf("truncated: %d events, %v", len(evs), err)
	}
}

func TestMarshalRoundTripValues(t *testing.T) {
	e := Event{WallTime: 1.7e9 + 0.25, Step: 1 << 40, Values: []Value{{"x", float32(math.Pi)}, {"y", float32(math.Inf(1))}}}
	got, err := Unmarshal(Marshal(e))
	if err != nil {
		t.Fatal(err)
	}
	if got.WallTime != e.WallTime || got.Step != e.Step || len(got.Values) != 2 || got.Values[0] != e.Values[0] || !math.IsInf(float64(got.Values[1].Value), 1) {
		t.Fatalf("%+v", got)
	}
}
