#!/bin/sh
# charge-card.sh: the charge_card step of examples/billing-charge.yaml.
#
# Charges the invoice total computed by prepare_invoice. The payment
# gateway is simulated: its first call times out (exit 1, which weft
# retries by the step's retry policy) and the next one succeeds. A card
# named "declined" is refused with exit 2, which the step lists in
# permanent_exit_codes: retrying cannot help, so the step fails at once.
set -eu
. "${0%/*}/json.sh"
ctx=$(cat)
card=$(ctx_part input | json_get card || echo unknown)
total=$(ctx_part deps | json_get total_cents)

if [ "$card" = declined ]; then
	echo "the card issuer declined the charge" >&2
	exit 2
fi
if [ "$WEFT_ATTEMPT" -lt 2 ]; then
	echo "payment gateway did not answer within 10s (attempt $WEFT_ATTEMPT)" >&2
	exit 1
fi
printf '{"charge_id": "ch_%s_%s", "amount_cents": %s, "attempt": %s}\n' \
	"$WEFT_TASK_ID" "$WEFT_ATTEMPT" "$total" "$WEFT_ATTEMPT"
