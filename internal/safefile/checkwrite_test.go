package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// CheckWrite refuses an output that is an input before an existing one,
// and an existing output only without force.
func TestCheckWrite(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(in, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ins := []Path{{Flag: "model", Path: in}}
	if err := CheckWrite([]Path{{Flag: "out", Path: in}}, ins, true); !errors.Is(err, ErrOutputIsInput) {
		t.Fatalf("out = input with force: %v, want ErrOutputIsInput", err)
	}
	if err := CheckWrite([]Path{{Flag: "out", Path: out}}, ins, false); err != nil {
		t.Fatalf("new out: %v", err)
	}
	if err := os.WriteFile(out, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckWrite([]Path{{Flag: "out", Path: out}}, ins, false); !errors.Is(err, ErrOutputExists) {
		t.Fatalf("existing out: %v, want ErrOutputExists", err)
	}
	if err := CheckWrite([]Path{{Flag: "out", Path: out}}, ins, true); err != nil {
		t.Fatalf("existing out with force: %v", err)
	}
}
