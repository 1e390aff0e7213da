package local

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scale changes the size of the running cluster in dir to n and waits until it is healthy:
// new members join one at a time as learners and are promoted; removed members (the highest
// ones) hand over leadership first, leave etcd, then stop. progress, if set, receives a line
// whenever the members change while it waits.
func Scale(ctx context.Context, dir Dir, n int, timeout time.Duration, progress func(string)) error {
	if err := CheckSize(n); err != nil {
		return fmt.Errorf("size %d: %w", n, err)
	}
	if _, running := dir.SupervisorRunning(); !running {
		return fmt.Errorf("the cluster in %s is not running: start it with `steward local up --dir %s`, then scale", dir, dir)
	}
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no local cluster in %s", dir)
	}
	switch {
	case n == len(spec.Members):
	case n < len(spec.Members):
		spec.Members = spec.Members[:n]
	default:
		maxPort := 0
		for _, m := range spec.Members {
			maxPort = max(maxPort, m.ClientPort, m.PeerPort, m.SidecarPort, m.HealthPort)
		}
		add := n - len(spec.Members)
		ports, err := freePorts(spec.Host, maxPort+1, 4*add)
		if err != nil {
			return err
		}
		next := 0
		for _, m := range spec.Members {
			if i, err := strconv.Atoi(m.Name[1:]); err == nil {
				next = max(next, i+1)
			}
		}
		for i := 0; i < add; i++ {
			spec.Members = append(spec.Members, MemberSpec{Name: fmt.Sprintf("m%d", next+i),
				ClientPort: ports[4*i], PeerPort: ports[4*i+1], SidecarPort: ports[4*i+2], HealthPort: ports[4*i+3]})
		}
	}
	if err := writeSpec(dir, spec); err != nil {
		return err
	}
	if err := dir.Wake(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if progress != nil {
		progress(fmt.Sprintf("scaling to %d members", n))
	}
	last := ""
	err = waitFor(wctx, dir, nil, func(_ State, rep Report) (bool, error) {
		if line := describeMembers(rep); progress != nil && line != last {
			progress(line)
			last = line
		}
		return rep.Cluster.Size == n && len(rep.Members) == n && allHealthyVoters(rep), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("the cluster did not reach %d healthy members within %s; see `steward local status --dir %s` and %s", n, timeout, dir, dir.SupervisorLog())
	}
	return err
}

func allHealthyVoters(rep Report) bool {
	for _, m := range rep.Members {
		if !m.Healthy || (m.Role != RoleLeader && m.Role != RoleFollower) {
			return false
		}
	}
	return true
}

// describeMembers is a progress line of the members' roles, each marked when not healthy.
func describeMembers(rep Report) string {
	parts := make([]string, 0, len(rep.Members))
	for _, m := range rep.Members {
		p := m.Name + " " + m.Role
		if !m.Healthy {
			p += " (not healthy yet)"
		}
		parts = append(parts, p)
	}
	return "members: " + strings.Join(parts, ", ")
}
