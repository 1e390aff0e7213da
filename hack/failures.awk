# Prints again, after a verbose `go test` run, what each failing test itself logged: in a run of
# parallel tests a failure's message sits among other tests' lines, far above the summary.
# Usage: awk -f hack/failures.awk LOG
/^=== (RUN|NAME|CONT|PAUSE)/ { current = $3; next }
/^ *--- (PASS|FAIL|SKIP)/ {
	if ($2 == "FAIL:") failed[++n] = $3
	next
}
current != "" {
	k = ++count[current]
	logged[current, k] = $0
}
END {
	if (n == 0) exit
	print "\n=== what each failing test logged (its last 40 lines) ==="
	for (i = 1; i <= n; i++) {
		t = failed[i]
		print "--- " t
		for (k = (count[t] > 40 ? count[t] - 39 : 1); k <= count[t]; k++) print logged[t, k]
	}
}
