package sysmem

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

const meminfo = `MemTotal:       24684096 kB
MemFree:        15000000 kB
MemAvailable:   20000000 kB
Cached:          5132328 kB
`

// fakeRoot writes files (path → content) under a temporary "/".
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAvailableMeminfoOnly(t *testing.T) {
	root := fakeRoot(t, map[string]string{"proc/meminfo": meminfo})
	m, err := available(root)
	if err != nil {
		t.Fatal(err)
	}
	if m.Bytes != 20000000*1024 || m.Total != 24684096*1024 || m.Limit != m.Total || m.Source != "MemAvailable" {
		t.Fatalf("%+v", m)
	}
}

// cgroup v1: the tightest of the process's group and its parents counts,
// usage less the inactive file cache; "no limit" (a huge number) is skipped.
func TestAvailableCgroupV1(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/meminfo":     meminfo,
		"proc/self/cgroup": "9:name=systemd:/\n4:memory:/a/b\n3:cpuset:/\n",
		"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
		"sys/fs/cgroup/memory/memory.usage_in_bytes":     "3000000000\n",
		"sys/fs/cgroup/memory/a/memory.limit_in_bytes":   "10000000000\n",
		"sys/fs/cgroup/memory/a/memory.usage_in_bytes":   "4000000000\n",
		"sys/fs/cgroup/memory/a/memory.stat":             "cache 2000000000\ntotal_inactive_file 1000000000\n",
		"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": "9223372036854771712\n",
		"sys/fs/cgroup/memory/a/b/memory.usage_in_bytes": "1000\n",
	})
	m, err := available(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(10000000000 - (4000000000 - 1000000000)); m.Bytes != want || m.Source != "cgroup /a memory.limit_in_bytes" {
		t.Fatalf("got %+v, want %d from /a", m, want)
	}
	if m.Limit != 10000000000 { // /a's limit, below MemTotal
		t.Fatalf("limit %d, want /a's", m.Limit)
	}
}

// cgroup v2: memory.max "max" is no limit; a limit above MemAvailable does
// not count.
func TestAvailableCgroupV2(t *testing.T) {
	files := map[string]string{
		"proc/meminfo":                                meminfo,
		"proc/self/cgroup":                            "0::/user.slice/job\n",
		"sys/fs/cgroup/memory.max":                    "max\n",
		"sys/fs/cgroup/memory.current":                "1\n",
		"sys/fs/cgroup/user.slice/job/memory.max":     "8000000000\n",
		"sys/fs/cgroup/user.slice/job/memory.current": "2000000000\n",
		"sys/fs/cgroup/user.slice/job/memory.stat":    "anon 1000000000\ninactive_file 500000000\n",
	}
	m, err := available(fakeRoot(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(8000000000 - 1500000000); m.Bytes != want || m.Source != "cgroup /user.slice/job memory.max" {
		t.Fatalf("got %+v, want %d", m, want)
	}
	if m.Limit != 8000000000 {
		t.Fatalf("limit %d, want the job's", m.Limit)
	}
	files["sys/fs/cgroup/user.slice/job/memory.max"] = "900000000000\n"
	if m, err = available(fakeRoot(t, files)); err != nil || m.Source != "MemAvailable" || m.Limit != m.Total {
		t.Fatalf("a loose limit: %+v, %v", m, err)
	}
}

func TestAvailableMissing(t *testing.T) {
	if _, err := available(t.TempDir()); !errors.Is(err, ErrUnknown) {
		t.Fatalf("no /proc/meminfo: %v", err)
	}
	root := fakeRoot(t, map[string]string{"proc/meminfo": "MemTotal: 5 kB\n"})
	if _, err := available(root); !errors.Is(err, ErrUnknown) {
		t.Fatalf("no MemAvailable: %v", err)
	}
}

// On Linux the real figures are sane: 0 < available ≤ total.
func TestAvailableHere(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	m, err := Available()
	if err != nil {
		t.Fatal(err)
	}
	if m.Bytes <= 0 || m.Bytes > m.Total {
		t.Fatalf("%+v", m)
	}
	t.Logf("%+v", m)
}
