#!/bin/sh
# json.sh: helpers for example scripts that read weft's step context.
#
# Source it from a script in this directory:
#
#   . "${0%/*}/json.sh"
#
# An exec step gets its context as one line of JSON on stdin:
#
#   {"task_id":1,"step":"charge_card","attempt":1,"input":{...},
#    "deps":{"prepare_invoice":{...}},"config":{...},"checkpoint":null}
#
# (and "batch" for an item of a batch). These helpers are deliberately
# small: they handle the flat, one-line JSON the examples use, not JSON in
# general. POSIX sh and awk only.

# json_get KEY: print the first scalar value of "KEY" in the JSON on stdin
# (a string without its quotes, a number, true, false or null). Exit
# status 1 when there is no such key.
json_get() {
	awk -v k="\"$1\":" '{
		i = index($0, k)
		if (i == 0) exit 1
		s = substr($0, i + length(k))
		if (s ~ /^"/) { s = substr(s, 2); sub(/".*/, "", s) } else sub(/[,}\]].*/, "", s)
		print s
		found = 1
		exit
	} END { if (!found) exit 1 }'
}

# ctx_part NAME: print the step context from "NAME": onwards, so that
# json_get finds keys of that part first: ctx_part input | json_get sku.
# Reads the context from $ctx.
ctx_part() {
	printf '%s\n' "${ctx#*\"$1\":}"
}
