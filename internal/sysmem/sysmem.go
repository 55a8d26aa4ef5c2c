// Package sysmem reads how much memory this process can still take: the
// kernel's MemAvailable (/proc/meminfo: free memory plus the page cache and
// slab it can reclaim) and, when the process runs in a memory cgroup with a
// limit, that limit minus the group's non-reclaimable usage — the smaller of
// the two. Linux only; elsewhere Available returns ErrUnknown.
package sysmem

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUnknown: the available memory cannot be read on this system.
var ErrUnknown = errors.New("sysmem: available memory unknown")

// Memory is the memory available to this process now.
type Memory struct {
	Bytes  int64  // min(MemAvailable, the cgroup's room)
	Source string // where Bytes comes from, e.g. "MemAvailable" or "cgroup /x memory.limit_in_bytes"
	Total  int64  // MemTotal
	// Limit: what this process may use at all, MemTotal or a smaller
	// memory cgroup limit.
	Limit int64
}

// Available reads /proc/meminfo and this process's memory cgroups.
func Available() (Memory, error) { return available("/") }

// available reads the files under root (a directory standing for "/" in tests).
func available(root string) (Memory, error) {
	mi, err := readKV(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return Memory{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	avail, ok1 := mi["MemAvailable"]
	total, ok2 := mi["MemTotal"]
	if !ok1 || !ok2 {
		return Memory{}, fmt.Errorf("%w: no MemAvailable/MemTotal in /proc/meminfo", ErrUnknown)
	}
	m := Memory{Bytes: avail * 1024, Source: "MemAvailable", Total: total * 1024, Limit: total * 1024}
	for _, g := range cgroupRooms(root) {
		if g.room < m.Bytes {
			m.Bytes, m.Source = g.room, g.source
		}
		m.Limit = min(m.Limit, g.limit)
	}
	return m, nil
}

type room struct {
	room   int64 // limit − non-reclaimable usage
	limit  int64
	source string
}

// cgroupRooms: for every memory cgroup of this process with a limit, from
// its own directory up to the hierarchy's root, limit − (usage − inactive
// file cache). Unreadable files are skipped (no limit known there).
func cgroupRooms(root string) []room {
	f, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return nil
	}
	var out []room
	for _, line := range strings.Split(strings.TrimSpace(string(f)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var base, limitF, usageF, inactiveK string
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			base, limitF, usageF, inactiveK = "sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"
		case hasController(parts[1], "memory"): // cgroup v1
			base, limitF, usageF, inactiveK = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
		default:
			continue
		}
		for p := filepath.Clean("/" + parts[2]); ; p = filepath.Dir(p) {
			dir := filepath.Join(root, base, p)
			limit, err1 := readInt(filepath.Join(dir, limitF))
			usage, err2 := readInt(filepath.Join(dir, usageF))
			// v1 reports "no limit" as a huge number (PAGE_COUNTER_MAX pages)
			if err1 == nil && err2 == nil && limit > 0 && limit < 1<<60 {
				if st, err := readKV(filepath.Join(dir, "memory.stat")); err == nil {
					usage -= min(st[inactiveK], usage)
				}
				out = append(out, room{room: max(limit-usage, 0), limit: limit, source: "cgroup " + p + " " + limitF})
			}
			if p == "/" {
				break
			}
		}
	}
	return out
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readInt reads a file holding one integer ("max" is no limit: an error).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKV reads "key value [unit]" or "key: value [unit]" lines.
func readKV(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
			out[strings.TrimSuffix(fs[0], ":")] = v
		}
	}
	return out, sc.Err()
}
