#!/usr/bin/env bash
# Build cost of each driver: wall time of a clean `go build` of cmd/probe
# (fresh, empty GOCACHE, so the standard library is compiled too; the module
# cache must already hold the sources, so no download time is counted), the
# time of a relink with a warm cache, and the binary size (default and
# -ldflags='-s -w'). "none" is the same program with no driver, the baseline.
#
#   ./buildcost.sh            # all, 2 repetitions
#   REPS=3 ./buildcost.sh mattn
set -euo pipefail
cd "$(dirname "$0")"
REPS=${REPS:-2}
TAGS=${*:-none mattn modernc ncruces}
mkdir -p bin
go mod download
printf '%-8s %8s %8s %12s %12s %s\n' driver clean_s relink_s size_B stripped_B linkage
for tag in $TAGS; do
	for rep in $(seq "$REPS"); do
		cache=$(mktemp -d)
		t0=$(date +%s.%N)
		GOCACHE=$cache go build -tags "$tag" -o "bin/probe-$tag" ./cmd/probe
		t1=$(date +%s.%N)
		GOCACHE=$cache go build -tags "$tag" -ldflags "-X main.stamp=$RANDOM$rep" -o "bin/probe-$tag" ./cmd/probe
		t2=$(date +%s.%N)
		GOCACHE=$cache go build -tags "$tag" -ldflags '-s -w' -o "bin/probe-$tag-stripped" ./cmd/probe
		rm -rf "$cache"
		link=$(file -b "bin/probe-$tag" | grep -o 'statically linked\|dynamically linked' || true)
		printf '%-8s %8.1f %8.2f %12d %12d %s\n' "$tag" \
			"$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" \
			"$(stat -c %s "bin/probe-$tag")" "$(stat -c %s "bin/probe-$tag-stripped")" "$link"
	done
done
