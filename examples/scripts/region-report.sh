#!/bin/sh
# region-report.sh: one item of the regions batch in
# examples/regional-reports.yaml.
#
# Its batch item arrives under "batch" in the step context:
# {"file": "examples/data/sales.csv", "month": "2024-05", "region": "emea"}.
# It totals that region's orders for the month and prints
# {"region": ..., "orders": N, "revenue_cents": N}.
set -eu
. "${0%/*}/json.sh"
ctx=$(cat)
file=$(ctx_part batch | json_get file)
month=$(ctx_part batch | json_get month)
region=$(ctx_part batch | json_get region)
[ -r "$file" ] || { echo "cannot read $file" >&2; exit 2; }
awk -F, -v m="$month" -v r="$region" '
	NR > 1 && $2 == m && $3 == r { n++; s += $4 }
	END { printf "{\"region\": \"%s\", \"orders\": %d, \"revenue_cents\": %d}\n", r, n, s }' "$file"
