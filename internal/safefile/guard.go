package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Sentinels of the output guard ([CheckOutputs]); the errors it returns are
// *[OutputError] values that wrap one of them (or fs.ErrNotExist).
var (
	// ErrOutputIsInput: an output is the same file as an input.
	ErrOutputIsInput = errors.New("an output would overwrite an input")
	// ErrOutputsCollide: two outputs are the same file.
	ErrOutputsCollide = errors.New("two outputs are the same file")
	// ErrOutputInRun: an output lies inside a training run directory (a
	// folder holding RunMarker) that the command does not own.
	ErrOutputInRun = errors.New("an output would land inside a run directory")
	// ErrOutputExists: an output exists, and the command was not told to
	// replace it ([CheckNew]).
	ErrOutputExists = errors.New("an output exists")
)

// RunMarker is the file that makes a folder a training run directory
// (trainer.RunFile, written by `empo2 train`): [CheckOutputs] refuses an
// output anywhere inside such a folder unless the output's RunLayout
// allows it — a run's files are written by the command that owns the run.
const RunMarker = "run.json"

// ForceFlag is the one flag name of every command for replacing an existing
// output it did not write ([CheckNew]).
const ForceFlag = "--force"

// Path is a path a command reads or writes, with the flag that names it on
// the command line ("--out", "-m", "PEFT_DIR"), for the error message.
type Path struct {
	Flag string
	Path string // "" (an optional flag not given) is skipped
	// Dir: a folder (an output the command writes files into, or an input
	// it reads files from); otherwise a file.
	Dir bool
	// Files with Dir: names of the files in the folder the command writes
	// (output) or reads (input), checked like outputs and inputs of their
	// own. An input folder given as one of its files has them beside it.
	Files []string
	// RunLayout, for an output: slash-separated glob patterns, relative to
	// a run directory, of the places inside a run where this output may be
	// written (eval's results: "eval/*.json"); elsewhere inside a run
	// directory an output is refused (ErrOutputInRun).
	RunLayout []string
}

// OutputError is a refusal of [CheckOutputs].
type OutputError struct {
	Err   error // ErrOutputIsInput, ErrOutputsCollide, ErrNotFile, ErrNotDir or fs.ErrNotExist
	Out   Path  // the output refused (for a file of a Dir output, its path)
	Other Path  // the input or output it is the same file as; the missing folder for fs.ErrNotExist
}

func (e *OutputError) Error() string {
	switch e.Err {
	case ErrOutputIsInput:
		return fmt.Sprintf("%s %s would overwrite the input %s %s (the same file): writing it would destroy the input",
			e.Out.Flag, e.Out.Path, e.Other.Flag, e.Other.Path)
	case ErrOutputsCollide:
		return fmt.Sprintf("%s %s and %s %s are the same file: one output would overwrite the other",
			e.Other.Flag, e.Other.Path, e.Out.Flag, e.Out.Path)
	case ErrNotFile:
		return fmt.Sprintf("%s %s is a directory: it must name a file", e.Out.Flag, e.Out.Path)
	case ErrNotDir:
		return fmt.Sprintf("%s %s is not a directory: it must name a folder (the command writes several files into it)", e.Out.Flag, e.Out.Path)
	case fs.ErrNotExist:
		return fmt.Sprintf("%s %s: the folder %s does not exist (no such file or directory)", e.Out.Flag, e.Out.Path, e.Other.Path)
	case ErrOutputInRun:
		return fmt.Sprintf("%s %s lies inside the training run directory %s (it holds %s), which this command does not own: writing there could replace the run's files (its config, metrics, checkpoints); write it outside the run",
			e.Out.Flag, e.Out.Path, e.Other.Path, RunMarker)
	case ErrOutputExists:
		return fmt.Sprintf("%s %s exists, and this command did not write it: give %s to replace it, or choose another path", e.Out.Flag, e.Other.Path, ForceFlag)
	}
	return fmt.Sprintf("%s %s: %v", e.Out.Flag, e.Out.Path, e.Err)
}

func (e *OutputError) Unwrap() error { return e.Err }

// CheckOutputs refuses, before a command opens anything for writing:
//
//   - a file output that names a directory ("." and "out/" included;
//     ErrNotFile) or lies in a folder that does not exist (fs.ErrNotExist),
//     and a folder output (Dir) that exists and is not a folder (ErrNotDir);
//   - an output that is the same file as an input (ErrOutputIsInput), a
//     folder output that is the same folder as an input, and a file that a
//     folder output writes (Files) that is an input or a file of an input
//     folder;
//   - two outputs that are the same file (ErrOutputsCollide);
//   - an output inside a training run directory, a folder above it that
//     holds RunMarker, unless the output's RunLayout allows it there
//     (ErrOutputInRun): every file of a run is an input of every command
//     but the train that owns it.
//
// Sameness resolves symlinks and hard links: existing files are compared
// with os.SameFile, files that do not exist yet by their absolute path with
// the symlinks of its existing part (and a dangling symlink at its end)
// resolved. Existing devices, FIFOs and sockets (/dev/null, /dev/stdout)
// are written in place, destroy nothing and are never refused. Empty paths
// are skipped, so optional flags can be passed as they are:
//
//	err := safefile.CheckOutputs(
//		[]safefile.Path{{Flag: "-o", Path: out}, {Flag: "--checkpoint", Path: ckpt}},
//		[]safefile.Path{{Flag: "-m", Path: model}, {Flag: "--data", Path: data}, {Flag: "--init", Path: init}})
func CheckOutputs(outputs, inputs []Path) error {
	var outs, ins []entry
	for _, o := range outputs {
		if o.Path == "" {
			continue
		}
		if err := checkRun(o, o.RunLayout); err != nil {
			return err
		}
		if err := checkKind(o); err != nil {
			return err
		}
		outs = append(outs, members(o, true)...)
	}
	for _, in := range inputs {
		if in.Path != "" {
			ins = append(ins, members(in, false)...)
		}
	}
	for i, o := range outs {
		if o.id.device {
			continue
		}
		for _, in := range ins {
			if o.id.same(in.id) {
				return &OutputError{Err: ErrOutputIsInput, Out: o.p, Other: in.p}
			}
		}
		for _, prev := range outs[:i] {
			if o.id.same(prev.id) {
				return &OutputError{Err: ErrOutputsCollide, Out: o.p, Other: prev.p}
			}
		}
	}
	return nil
}

// SameFile reports whether the paths a and b name the same file, as
// [CheckOutputs] decides it (symlinks and hard links resolved; files that
// do not exist compared by resolved path).
func SameFile(a, b string) bool { return a == b || identify(a).same(identify(b)) }

// checkKind checks that an output is a file path or a folder path as wanted.
func checkKind(o Path) error {
	fi, err := os.Stat(o.Path)
	if o.Dir {
		if err == nil && !fi.IsDir() {
			return &OutputError{Err: ErrNotDir, Out: o}
		}
		return nil
	}
	if namesDir(o.Path) || (err == nil && fi.IsDir()) {
		return &OutputError{Err: ErrNotFile, Out: o}
	}
	if err == nil {
		return nil
	}
	p, ferr := followDangling(o.Path)
	if ferr != nil {
		return &OutputError{Err: ferr, Out: o}
	}
	if perr := parentIsDir(p); errors.Is(perr, fs.ErrNotExist) {
		return &OutputError{Err: fs.ErrNotExist, Out: o, Other: Path{Path: filepath.Dir(p)}}
	} else if perr != nil {
		return &OutputError{Err: perr, Out: o}
	}
	return nil
}

// entry is one file (or folder) of a Path, with its identity.
type entry struct {
	p  Path // Path: the file itself
	id ident
}

// checkRun refuses an output inside a run directory (a folder, above it,
// that holds RunMarker) unless it matches one of layout's patterns.
func checkRun(o Path, layout []string) error {
	p := resolvePath(o.Path)
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, RunMarker)); err == nil && fi.Mode().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err == nil {
				for _, pat := range layout {
					if ok, _ := filepath.Match(pat, filepath.ToSlash(rel)); ok {
						return nil
					}
				}
			}
			return &OutputError{Err: ErrOutputInRun, Out: o, Other: Path{Path: dir}}
		}
		if parent := filepath.Dir(dir); parent == dir {
			return nil
		}
	}
}

// CheckNew refuses, unless force, an output that exists and is not a
// device (ErrOutputExists, naming the file): a command replaces only what
// it is told to. For a folder output (Dir) its Files are checked; the
// folder itself may exist. Call it after [CheckOutputs].
func CheckNew(outputs []Path, force bool) error {
	if force {
		return nil
	}
	for _, o := range outputs {
		if o.Path == "" {
			continue
		}
		files := []string{o.Path}
		if o.Dir {
			files = files[:0]
			for _, f := range o.Files {
				files = append(files, filepath.Join(o.Path, f))
			}
		}
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && (fi.Mode().IsRegular() || fi.IsDir()) {
				return &OutputError{Err: ErrOutputExists, Out: o, Other: Path{Path: f}}
			}
		}
	}
	return nil
}

// CheckWrite is the whole output guard of a command before it writes:
// [CheckOutputs] (no output is an input, another output or inside a run
// directory it does not own), then [CheckNew] (no existing file replaced
// unless force).
func CheckWrite(outputs, inputs []Path, force bool) error {
	if err := CheckOutputs(outputs, inputs); err != nil {
		return err
	}
	return CheckNew(outputs, force)
}

// members is p's own entry and, for a folder, those of its Files. An input
// folder may be given as one of its files (`lora import DIR/weights`): its
// Files are then those beside it.
func members(p Path, output bool) []entry {
	es := []entry{{p: p, id: identify(p.Path)}}
	if !p.Dir {
		return es
	}
	dir := p.Path
	if fi, err := os.Stat(dir); !output && err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	for _, name := range p.Files {
		f := filepath.Join(dir, name)
		es = append(es, entry{p: Path{Flag: p.Flag, Path: f}, id: identify(f)})
	}
	return es
}

// ident is what makes a path the file it is: the file's identity when it
// exists, its resolved absolute path when not.
type ident struct {
	fi     os.FileInfo // nil when the file does not exist
	device bool        // an existing non-regular, non-folder file
	path   string      // resolved path when fi is nil
}

func identify(p string) ident {
	if fi, err := os.Stat(p); err == nil {
		return ident{fi: fi, device: !fi.Mode().IsRegular() && !fi.IsDir()}
	}
	return ident{path: resolvePath(p)}
}

func (a ident) same(b ident) bool {
	if a.fi != nil && b.fi != nil {
		return os.SameFile(a.fi, b.fi)
	}
	return a.fi == nil && b.fi == nil && a.path == b.path
}

// resolvePath is p made absolute, with a dangling symlink at its end
// followed and the symlinks of its longest existing prefix resolved.
func resolvePath(p string) string {
	if f, err := followDangling(p); err == nil {
		p = f
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	var rest []string
	for cur := abs; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}
