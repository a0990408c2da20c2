#!/bin/sh
# backfill-ledger.sh: the backfill step of examples/ledger-backfill.yaml.
#
# Recomputes the closing balance of each day from input.from_day to
# input.to_day. After each day it saves a checkpoint, {"day": D, "balance":
# B}, and reports its progress, one JSON object per line on file descriptor
# 3 (weft's control channel, $WEFT_CONTROL_FD). When an attempt starts with
# a checkpoint in its context (a previous attempt failed, or its worker was
# killed), it resumes after the checkpointed day instead of from the start.
#
# To show that, the first attempt loses its database connection after
# input.fail_after_day (if given) and exits 1; weft retries the step, and
# the second attempt carries on from the checkpoint.
set -eu
. "${0%/*}/json.sh"
ctx=$(cat)
from=$(ctx_part input | json_get from_day || echo 1)
to=$(ctx_part input | json_get to_day || echo 10)
fail_after=$(ctx_part input | json_get fail_after_day || echo 0)

day=$from balance=0
if cp_day=$(ctx_part checkpoint | json_get day); then
	day=$((cp_day + 1))
	balance=$(ctx_part checkpoint | json_get balance)
fi
resumed_from=$day

while [ "$day" -le "$to" ]; do
	sleep 0.05 # the day's queries
	balance=$((balance + day * 100))
	printf '{"checkpoint": {"day": %d, "balance": %d}}\n' "$day" "$balance" >&3
	printf '{"progress": %s, "message": "day %d of %d-%d"}\n' \
		"$(awk -v d="$((day - from + 1))" -v n="$((to - from + 1))" 'BEGIN { printf "%.3f", d / n }')" \
		"$day" "$from" "$to" >&3
	if [ "$WEFT_ATTEMPT" -eq 1 ] && [ "$day" -eq "$fail_after" ]; then
		echo "lost the connection to the ledger database after day $day" >&2
		exit 1
	fi
	day=$((day + 1))
done
printf '{"days": %d, "balance": %d, "resumed_from_day": %d, "attempt": %d}\n' \
	"$((to - from + 1))" "$balance" "$resumed_from" "$WEFT_ATTEMPT"
