#!/usr/bin/env bash
# Runs each fuzz target (package:Target) for FUZZTIME. Each package's test binary is built once
# with the fuzzing instrumentation and reused for all its targets: linking it again for every
# target took as long as the fuzzing itself. Failing inputs are written to the package's
# testdata/fuzz, as `go test -fuzz` writes them, and replayed by every `go test` after.
set -uo pipefail
fuzztime=${FUZZTIME:-10s}
go=${GO:-go}
module=$($go list -m)
cache=$($go env GOCACHE)/fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A built
run() { # package dir, binary, target
	(cd "$1" && "$2" -test.run '^$' -test.fuzz "^$3\$" -test.fuzztime "$fuzztime" -test.fuzzminimizetime 10s \
		-test.fuzzcachedir "$cache/$module/${1#./}" 2>&1)
}
for pt in "$@"; do
	p=${pt%%:*} t=${pt##*:}
	bin=$work/$(echo "${p#./}" | tr / _).test
	if [ -z "${built[$p]:-}" ]; then
		$go test -c -o "$bin" -fuzz "^$t\$" "$p" || exit 1
		built[$p]=1
	fi
	echo "fuzz $p $t for $fuzztime"
	out=$(run "$p" "$bin" "$t"); rc=$?
	echo "$out" | grep -v '^fuzz: elapsed'
	if [ $rc -ne 0 ] && echo "$out" | grep -q 'context deadline exceeded' && ! echo "$out" | grep -q 'Failing input written'; then
		echo "fuzz $p $t again: the fuzzing engine itself timed out, with no failing input"
		out=$(run "$p" "$bin" "$t"); rc=$?
		echo "$out" | grep -v '^fuzz: elapsed'
	fi
	[ $rc -eq 0 ] || { echo "fuzz $p $t failed"; exit 1; }
done
