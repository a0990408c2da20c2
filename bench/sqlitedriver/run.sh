#!/usr/bin/env bash
# Runs the driver comparison: builds one test binary per driver, checks the
# DSN settings (TestConfig, TestClaimComplete), then runs every benchmark
# ROUNDS times, interleaving drivers (rotating their order each round) so
# that drift on a shared machine hits all of them alike. Each benchmark run
# is its own process with a fixed op count, so every driver does the same
# work on the same table sizes. Summarised with benchstat when installed
# (go install golang.org/x/perf/cmd/benchstat@latest).
#
# Before each benchmark process it waits (up to QUIET_MAX seconds) until the
# machine's CPU use over 2 s is below QUIET_PCT percent, so that other work on
# a 2-core machine disturbs the figures less; waits are logged to stderr.
#
#   ./run.sh                         # 10 rounds, ~20 min on an idle 2-core machine
#   ROUNDS=3 DRIVERS="mattn modernc" ./run.sh
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-10}
read -r -a DRIVERS <<<"${DRIVERS:-mattn modernc ncruces}"
OUT=${OUT:-results/bench.txt}
# name:benchtime. One op = one row for InsertBatch and ClaimComplete.
BENCHES=(InsertBatch:500000x ClaimComplete:200000x PointRead:200000x)
QUIET_PCT=${QUIET_PCT:-15}
QUIET_MAX=${QUIET_MAX:-60}

. ./quiet.sh

mkdir -p bin "$(dirname "$OUT")"
for d in "${DRIVERS[@]}"; do
	go test -c -tags "$d" -o "bin/$d.test" .
	"bin/$d.test" -test.run 'TestConfig|TestClaimComplete' -test.v | grep -E 'driver=|DSN|---' | sed "s/^/[$d] /"
done

: >"$OUT"
n=${#DRIVERS[@]}
for r in $(seq "$ROUNDS"); do
	for i in $(seq 0 $((n - 1))); do
		d=${DRIVERS[$(((i + r) % n))]}
		for spec in "${BENCHES[@]}"; do
			wait_quiet
			"bin/$d.test" -test.run '^$' -test.bench "^Benchmark${spec%%:*}\$" \
				-test.benchtime "${spec##*:}" -test.count 1 >>"$OUT"
		done
	done
	echo "round $r/$ROUNDS done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

BENCHSTAT=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ -x "$BENCHSTAT" ]; then
	"$BENCHSTAT" -col /driver "$OUT" | tee "${OUT%.txt}.benchstat.txt"
fi
