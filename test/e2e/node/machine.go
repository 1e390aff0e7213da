package node

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MachineState is what a node changes on this machine, as text to compare: iptables rules of
// every table, links and addresses, mount points, the sysctls it touches, kubepods cgroups
// and the fixed paths outside its dir. Down must bring it back to what it was before Up.
func MachineState() (string, error) {
	var lines []string
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for _, table := range []string{"filter", "nat", "mangle", "raw"} {
		out, err := exec.Command("iptables-save", "-t", table).Output()
		if err != nil {
			return "", fmt.Errorf("iptables-save -t %s: %w", table, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			lines = append(lines, "iptables "+table+": "+counters.ReplaceAllString(l, ""))
		}
	}
	for _, args := range [][]string{{"-o", "link", "show"}, {"-o", "addr", "show"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return "", fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(l)
			if len(f) > 3 {
				// "N: name: <flags> ..." / "N: name inet ADDR ...": the name and the address or flags.
				lines = append(lines, "ip "+args[1]+": "+strings.Join(f[1:4], " "))
			}
		}
	}
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 {
			lines = append(lines, "mount: "+f[4])
		}
	}
	mounts.Close()
	for _, s := range sysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return "", err
		}
		lines = append(lines, "sysctl "+s+" = "+strings.TrimSpace(string(b)))
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + NodeName + "-*")
	cgroups = append(cgroups, roots...)
	for _, c := range cgroups {
		lines = append(lines, "cgroup: "+c)
	}
	for _, p := range fixedPaths {
		if _, err := os.Stat(p); err == nil {
			lines = append(lines, "path: "+p)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// DiffStates lists the lines only in before ("-") or only in after ("+").
func DiffStates(before, after string) []string {
	count := map[string]int{}
	for _, l := range strings.Split(before, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(after, "\n") {
		count[l]--
	}
	var diff []string
	for l, n := range count {
		switch {
		case n > 0:
			diff = append(diff, "- "+l)
		case n < 0:
			diff = append(diff, "+ "+l)
		}
	}
	sort.Strings(diff)
	return diff
}
