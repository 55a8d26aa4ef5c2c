package environments

import (
	"fmt"
	"strings"
)

// SplitVariations divides variations 0..n-1 into train, dev and test sets the
// way the ScienceWorld simulator does (PythonInterface.getSets): about 50% /
// 25% / 25% in contiguous blocks, with special cases for n < 5. Reusing the
// simulator's rule keeps the native worlds' splits comparable.
func SplitVariations(n int) (train, dev, test []int) {
	switch {
	case n <= 0:
		return nil, nil, nil
	case n == 1:
		return []int{0}, nil, []int{0}
	case n == 2:
		return []int{0}, nil, []int{1}
	case n == 3:
		return []int{0}, []int{1}, []int{2}
	case n == 4:
		return []int{0, 1}, []int{2}, []int{3}
	}
	size := n / 4
	var groups [][]int
	for start := 0; start < n; start += size {
		end := min(start+size, n)
		g := make([]int, 0, end-start)
		for i := start; i < end; i++ {
			g = append(g, i)
		}
		groups = append(groups, g)
	}
	train = append(append(train, groups[0]...), groups[1]...)
	dev = append(dev, groups[2]...)
	test = append(test, groups[3]...)
	if len(groups) > 4 {
		test = append(test, groups[4]...)
	}
	return train, dev, test
}

// WithSplits returns t with its Train, Dev and TestVars filled from
// SplitVariations(t.Variations).
func WithSplits(t Task) Task {
	t.Train, t.Dev, t.TestVars = SplitVariations(t.Variations)
	return t
}

// VariationsIn returns the task's variations in split s.
func (t Task) VariationsIn(s Split) ([]int, error) {
	switch s {
	case Train:
		return t.Train, nil
	case Dev:
		return t.Dev, nil
	case Test:
		return t.TestVars, nil
	}
	return nil, fmt.Errorf("%w: unknown split %q (want train, dev or test)", ErrBadVariation, s)
}

// ParseSplit parses "train", "dev" or "test".
func ParseSplit(s string) (Split, error) {
	switch Split(strings.ToLower(strings.TrimSpace(s))) {
	case Train:
		return Train, nil
	case Dev:
		return Dev, nil
	case Test:
		return Test, nil
	}
	return "", fmt.Errorf("%w: unknown split %q (want train, dev or test)", ErrBadVariation, s)
}

// FindTask returns the task called name from tasks, or else the task whose
// Description starts with name and a colon (a short id, such as
// ScienceWorld's "3-1: …"). An empty name selects the only task of a
// single-task environment.
func FindTask(tasks []Task, name string) (Task, error) {
	if name == "" {
		if len(tasks) == 1 {
			return tasks[0], nil
		}
		return Task{}, fmt.Errorf("%w: a task name is required (have %s)", ErrUnknownTask, taskNames(tasks))
	}
	for _, t := range tasks {
		if t.Name == name {
			return t, nil
		}
	}
	for _, t := range tasks {
		if strings.HasPrefix(t.Description, name+":") {
			return t, nil
		}
	}
	return Task{}, fmt.Errorf("%w: %q (have %s)", ErrUnknownTask, name, taskNames(tasks))
}

// CheckVariation reports ErrBadVariation unless 0 <= v < t.Variations.
func CheckVariation(t Task, v int) error {
	if v < 0 || v >= t.Variations {
		return fmt.Errorf("%w: task %s has variations 0..%d, got %d", ErrBadVariation, t.Name, t.Variations-1, v)
	}
	return nil
}

// StepLimit is the step limit an episode of t runs under: opts.StepLimit when
// set, else the task's own limit, else 100 (ScienceWorld's default).
func StepLimit(t Task, opts Options) int {
	if opts.StepLimit > 0 {
		return opts.StepLimit
	}
	if t.StepLimit > 0 {
		return t.StepLimit
	}
	return DefaultStepLimit
}

// DefaultStepLimit is the step limit of a task that names none.
const DefaultStepLimit = 100

func taskNames(tasks []Task) string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	if len(names) > 12 {
		return strings.Join(names[:12], ", ") + fmt.Sprintf(", … (%d in all)", len(names))
	}
	return strings.Join(names, ", ")
}
