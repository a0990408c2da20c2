package claim

// This file holds the peek of preemption: which step a claim would take
// first, found by the claim's own query and policies, without marking it.
// An engine asks only while every slot is busy and a preemptible step of
// its runs, so a claim path with no preemptible step never runs it.
