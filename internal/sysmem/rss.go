package sysmem

import "syscall"

// PeakRSS is this process's peak resident set in bytes (getrusage's
// ru_maxrss, which Linux gives in KiB), 0 when unavailable.
func PeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}
