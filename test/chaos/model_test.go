package chaos

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// kvInput is one client call on one key. Values are unique across the run and never empty,
// so "" stands for an absent key.
type kvInput struct {
	Op     string // get | put | delete | cas
	Key    string
	Value  string // put, cas: the value written
	Expect string // cas: the value compared against
}

// kvOutput is what the call returned. Unknown: the call failed or timed out, so a write may or
// may not have been applied (its Return is moved past the end of the history).
type kvOutput struct {
	Unknown   bool
	Value     string // get: "" if absent
	Deleted   bool   // delete: a key was deleted
	Succeeded bool   // cas: the comparison held
	Revision  int64
}

// kvModel is a single register per key: the history is partitioned by key.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).Key
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
		st, in, out := state.(string), input.(kvInput), output.(kvOutput)
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
		in, out := input.(kvInput), output.(kvOutput)
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

// history collects operations from concurrent clients, timed on one monotonic clock.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// operations returns the history for the checker: a call whose outcome is unknown returns
// after every other operation, so it may take effect at any point after its call, or not at all.
func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var end int64
	for _, op := range h.ops {
		end = max(end, op.Return)
	}
	out := append([]porcupine.Operation(nil), h.ops...)
	for i := range out {
		if out[i].Output.(kvOutput).Unknown {
			out[i].Return = end + 1
		}
	}
	return out
}

// TestModel checks the checker on small histories, so that a passing chaos run means
// something: a stale read, a lost write and a wrong compare-and-swap are caught, and a write
// whose outcome is unknown may or may not have happened.
func TestModel(t *testing.T) {
	op := func(client int, call, ret int64, in kvInput, out kvOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	put := func(v string) kvInput { return kvInput{Op: "put", Key: "k", Value: v} }
	get := kvInput{Op: "get", Key: "k"}
	cas := func(from, to string) kvInput { return kvInput{Op: "cas", Key: "k", Expect: from, Value: to} }
	unknown := kvOutput{Unknown: true}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"read after write", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}), op(1, 2, 3, get, kvOutput{Value: "a"})}, true},
		{"stale read", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}), op(0, 2, 3, put("b"), kvOutput{}),
			op(1, 4, 5, get, kvOutput{Value: "a"})}, false},
		{"concurrent read sees either", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}), op(0, 2, 5, put("b"), kvOutput{}),
			op(1, 3, 4, get, kvOutput{Value: "a"})}, true},
		{"lost write", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}), op(1, 2, 3, get, kvOutput{})}, false},
		{"unknown write applied", []porcupine.Operation{op(0, 0, 1, put("a"), unknown), op(1, 2, 3, get, kvOutput{Value: "a"})}, true},
		{"unknown write not applied", []porcupine.Operation{op(0, 0, 1, put("a"), unknown), op(1, 2, 3, get, kvOutput{})}, true},
		{"cas", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}), op(1, 2, 3, cas("a", "b"), kvOutput{Succeeded: true}),
			op(1, 4, 5, get, kvOutput{Value: "b"})}, true},
		{"cas that should have failed", []porcupine.Operation{op(0, 0, 1, put("a"), kvOutput{}),
			op(1, 2, 3, cas("x", "b"), kvOutput{Succeeded: true})}, false},
		{"delete of an absent key deleted something", []porcupine.Operation{op(0, 0, 1, kvInput{Op: "delete", Key: "k"}, kvOutput{Deleted: true})}, false},
	} {
		h := &history{ops: tc.ops}
		if got := porcupine.CheckOperations(kvModel, h.operations()); got != tc.ok {
			t.Errorf("%s: linearizable=%t, want %t", tc.name, got, tc.ok)
		}
	}
}
