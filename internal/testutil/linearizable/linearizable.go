// Package linearizable records what etcd clients were told and checks, with porcupine, that
// some single order of the operations explains every answer: no acknowledged write lost, no
// stale read, no compare-and-swap decided on an old value. The chaos suite and the end-to-end
// writers share it.
package linearizable

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Input is one client call on one key. Values are unique across a history and never empty,
// so "" stands for an absent key.
type Input struct {
	Op     string // get | put | delete | cas
	Key    string
	Value  string // put, cas: the value written
	Expect string // cas: the value compared against
}

// Output is what the call returned. Unknown: the call failed or timed out, so a write may or
// may not have been applied (its Return is moved past the end of the history).
type Output struct {
	Unknown   bool
	Value     string // get: "" if absent
	Deleted   bool   // delete: a key was deleted
	Succeeded bool   // cas: the comparison held
	Revision  int64
}

// Model is a single register per key: the history is partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(Input), output.(Output)
		switch in.Op {
		case "get":
			return out.Unknown || out.Value == st, st
		case "put":
			return true, in.Value
		case "delete":
			return out.Unknown || out.Deleted == (st != ""), ""
		case "cas":
			holds := st == in.Expect
			next := st
			if holds {
				next = in.Value
			}
			return out.Unknown || out.Succeeded == holds, next
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		res := ""
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Op == "get":
			res = fmt.Sprintf("%q", out.Value)
		case in.Op == "delete":
			res = fmt.Sprintf("deleted=%t", out.Deleted)
		case in.Op == "cas":
			res = fmt.Sprintf("succeeded=%t", out.Succeeded)
		default:
			res = "ok"
		}
		if out.Revision > 0 {
			res += fmt.Sprintf(" @%d", out.Revision)
		}
		switch in.Op {
		case "put":
			return fmt.Sprintf("put(%s, %s) → %s", in.Key, in.Value, res)
		case "cas":
			return fmt.Sprintf("cas(%s, %s → %s) → %s", in.Key, in.Expect, in.Value, res)
		}
		return fmt.Sprintf("%s(%s) → %s", in.Op, in.Key, res)
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "(absent)"
		}
		return state.(string)
	},
}

// History collects operations from concurrent clients, timed on one monotonic clock.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Since is how long the history has been recorded.
func (h *History) Since() time.Duration { return time.Since(h.start) }

// Now is a time on the history's clock.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records one operation.
func (h *History) Add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Record runs in against etcd as client, timed, and adds it to the history: a failed read is
// left out (it changed nothing), a failed write is recorded with an unknown outcome. It
// returns the call's own result.
func (h *History) Record(ctx context.Context, cli *clientv3.Client, client int, in Input) (Output, error) {
	call := h.Now()
	out, err := Do(ctx, cli, in)
	ret := h.Now()
	if err != nil {
		if in.Op == "get" {
			return out, err
		}
		out = Output{Unknown: true}
	}
	h.Add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return out, err
}

// Operations returns the history for the checker: a call whose outcome is unknown returns
// after every other operation, so it may take effect at any point after its call, or not at all.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var end int64
	for _, op := range h.ops {
		end = max(end, op.Return)
	}
	out := append([]porcupine.Operation(nil), h.ops...)
	for i := range out {
		if out[i].Output.(Output).Unknown {
			out[i].Return = end + 1
		}
	}
	return out
}

// Do runs one operation against etcd.
func Do(ctx context.Context, cli *clientv3.Client, in Input) (Output, error) {
	switch in.Op {
	case "get":
		resp, err := cli.Get(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		out := Output{Revision: resp.Header.Revision}
		if len(resp.Kvs) == 1 {
			out.Value = string(resp.Kvs[0].Value)
		}
		return out, nil
	case "put":
		resp, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return Output{}, err
		}
		return Output{Revision: resp.Header.Revision}, nil
	case "delete":
		resp, err := cli.Delete(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		return Output{Deleted: resp.Deleted > 0, Revision: resp.Header.Revision}, nil
	case "cas":
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)).
			Then(clientv3.OpPut(in.Key, in.Value)).Commit()
		if err != nil {
			return Output{}, err
		}
		return Output{Succeeded: resp.Succeeded, Revision: resp.Header.Revision}, nil
	}
	return Output{}, fmt.Errorf("unknown operation %q", in.Op)
}

// Check runs porcupine over ops for at most timeout. It returns a verdict for the log, and an
// error when the history is not linearizable (naming the keys without a linearization and
// the visualisation written to dir as name.html) or the check did not finish.
func Check(ops []porcupine.Operation, timeout time.Duration, dir, name string) (string, error) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	took := time.Since(start).Round(time.Millisecond)
	switch res {
	case porcupine.Ok:
		return fmt.Sprintf("linearizable (%d operations checked in %s)", len(ops), took), nil
	case porcupine.Unknown:
		return "inconclusive", fmt.Errorf("linearizability check inconclusive: porcupine did not finish within %s", timeout)
	}
	path := filepath.Join(dir, name+".html")
	var bad []string
	for _, part := range Model.Partition(ops) {
		if !porcupine.CheckOperations(porcupine.Model{Init: Model.Init, Step: Model.Step}, part) {
			bad = append(bad, fmt.Sprintf("%s (%d operations)", part[0].Input.(Input).Key, len(part)))
		}
	}
	err := fmt.Errorf("NOT LINEARIZABLE: the history of %d operations has no linearization; keys without one: %s; visualisation: %s",
		len(ops), strings.Join(bad, ", "), path)
	if verr := porcupine.VisualizePath(Model, info, path); verr != nil {
		err = fmt.Errorf("%w (the visualisation could not be written: %v)", err, verr)
	}
	return "not linearizable, see " + path, err
}
