#!/usr/bin/env bash
# Build cost of each driver: a clean `go build` of cmd/probe (fresh, empty
# GOCACHE, so the standard library is compiled too; the module cache must
# already hold the sources, so no download time is counted), as wall time
# and as CPU time (user+sys, which other load on the machine disturbs less),
# then a relink with the warm cache, and the binary size (default and
# -ldflags='-s -w'). "none" is the same program with no driver: the baseline.
# Like run.sh it waits for a quiet machine before each build.
#
#   ./buildcost.sh                               # none mattn modernc ncruces, 3 repetitions
#   REPS=1 ./buildcost.sh mattn mattn,libsqlite3 # mattn against the system libsqlite3
set -euo pipefail
cd "$(dirname "$0")"
REPS=${REPS:-3}
TAGS=${*:-none mattn modernc ncruces}
QUIET_PCT=${QUIET_PCT:-15}
QUIET_MAX=${QUIET_MAX:-300}

. ./quiet.sh

mkdir -p bin
go mod download
printf '%-18s %8s %8s %9s %12s %12s %s\n' driver clean_s cpu_s relink_s size_B stripped_B linkage
for tag in $TAGS; do
	for rep in $(seq "$REPS"); do
		wait_quiet
		cache=$(mktemp -d)
		out="bin/probe-${tag//,/-}"
		/usr/bin/time -f '%e %U %S' -o bin/.time env GOCACHE="$cache" go build -tags "$tag" -o "$out" ./cmd/probe
		read -r wall user sys <bin/.time
		t1=$(date +%s.%N)
		GOCACHE=$cache go build -tags "$tag" -ldflags "-X main.stamp=$RANDOM$rep" -o "$out" ./cmd/probe
		t2=$(date +%s.%N)
		GOCACHE=$cache go build -tags "$tag" -ldflags '-s -w' -o "$out-stripped" ./cmd/probe
		rm -rf "$cache"
		link=$(file -b "$out" | grep -o 'statically linked\|dynamically linked' || true)
		printf '%-18s %8.1f %8.1f %9.2f %12d %12d %s\n' "$tag" "$wall" "$(echo "$user + $sys" | bc)" \
			"$(echo "$t2 - $t1" | bc)" "$(stat -c %s "$out")" "$(stat -c %s "$out-stripped")" "$link"
	done
done
