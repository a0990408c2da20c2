# shellcheck shell=bash
# Sourced by run.sh and buildcost.sh: wait_quiet waits until the machine's
# CPU use over 2 s is below QUIET_PCT percent, or QUIET_MAX seconds have
# passed, and logs any wait to stderr.

cpu_busy() { # percent of all CPUs busy over 2 s
	local a b
	read -r -a a < <(head -1 /proc/stat)
	sleep 2
	read -r -a b < <(head -1 /proc/stat)
	local idle=$(((b[4] + b[5]) - (a[4] + a[5]))) total=0 i
	for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
	echo $((total > 0 ? 100 * (total - idle) / total : 0))
}
wait_quiet() {
	local waited=0 busy
	while busy=$(cpu_busy) && [ "$busy" -ge "$QUIET_PCT" ] && [ "$waited" -lt "$QUIET_MAX" ]; do
		waited=$((waited + 2))
	done
	[ "$waited" -gt 0 ] && echo "  waited ${waited}s for a quiet machine (last: ${busy}% busy)" >&2
	return 0
}
