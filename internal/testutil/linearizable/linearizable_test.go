package linearizable

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModel checks the checker on small histories, so that a passing chaos run or
// end-to-end writer means something: a stale read, a lost write and a wrong compare-and-swap are caught, and a write
// whose outcome is unknown may or may not have happened.
func TestModel(t *testing.T) {
	op := func(client int, call, ret int64, in Input, out Output) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	put := func(v string) Input { return Input{Op: "put", Key: "k", Value: v} }
	get := Input{Op: "get", Key: "k"}
	cas := func(from, to string) Input { return Input{Op: "cas", Key: "k", Expect: from, Value: to} }
	unknown := Output{Unknown: true}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"read after write", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(1, 2, 3, get, Output{Value: "a"})}, true},
		{"stale read", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(0, 2, 3, put("b"), Output{}),
			op(1, 4, 5, get, Output{Value: "a"})}, false},
		{"concurrent read sees either", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(0, 2, 5, put("b"), Output{}),
			op(1, 3, 4, get, Output{Value: "a"})}, true},
		{"lost write", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(1, 2, 3, get, Output{})}, false},
		{"unknown write applied", []porcupine.Operation{op(0, 0, 1, put("a"), unknown), op(1, 2, 3, get, Output{Value: "a"})}, true},
		{"unknown write not applied", []porcupine.Operation{op(0, 0, 1, put("a"), unknown), op(1, 2, 3, get, Output{})}, true},
		{"cas", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(1, 2, 3, cas("a", "b"), Output{Succeeded: true}),
			op(1, 4, 5, get, Output{Value: "b"})}, true},
		{"cas that should have failed", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}),
			op(1, 2, 3, cas("x", "b"), Output{Succeeded: true})}, false},
		{"delete of an absent key deleted something", []porcupine.Operation{op(0, 0, 1, Input{Op: "delete", Key: "k"}, Output{Deleted: true})}, false},
	} {
		h := &History{ops: tc.ops}
		if got := porcupine.CheckOperations(Model, h.Operations()); got != tc.ok {
			t.Errorf("%s: linearizable=%t, want %t", tc.name, got, tc.ok)
		}
	}
}
