// Package proc reads what the benchmarks measure about processes from Linux's /proc: peak and
// current resident memory, and CPU time.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// Memory reads VmHWM (peak resident set) and VmRSS of pid, in bytes.
func Memory(pid int) (hwm, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := 0
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		f := strings.Fields(v) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("memory of process %d: unexpected %s line %q", pid, k, sc.Text())
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("memory of process %d: %s: %w", pid, k, err)
		}
		if k == "VmHWM" {
			hwm = n << 10
		} else {
			rss = n << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("memory of process %d: no VmHWM/VmRSS in /proc/%d/status (has it exited?)", pid, pid)
	}
	return hwm, rss, nil
}

// ResetPeak resets pid's VmHWM to its current RSS (writes 5 to /proc/<pid>/clear_refs), so
// that a later Memory reports the peak from now on.
func ResetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the peak RSS of process %d: %w", pid, err)
	}
	return nil
}

// CPU returns the user+system CPU time pid has used so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after its closing ")" are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("CPU time of process %d: unexpected /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state(3) ppid(4) ... utime(14) stime(15); f[0] is field 3.
	if len(f) < 13 {
		return 0, fmt.Errorf("CPU time of process %d: short /proc/%d/stat", pid, pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("CPU time of process %d: bad utime/stime in /proc/%d/stat", pid, pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// TotalCPU sums CPU over pids.
func TotalCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, p := range pids {
		c, err := CPU(p)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// MaxRSS is the peak resident set of an exited child, from its rusage (the kernel's VmHWM
// at exit), in bytes.
func MaxRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // kilobytes on Linux
	}
	return 0
}
