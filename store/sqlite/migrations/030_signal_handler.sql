-- A signal step's wait now begins under a claim, as any step starts: the
-- engine's built-in handler weft.signal claims it. Signal steps made
-- before have no handler; those not waiting yet would never be claimed.
UPDATE steps SET handler = 'weft.signal' WHERE kind = 'signal' AND handler = '';
