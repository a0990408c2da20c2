package claim

import "github.com/weftrun/weft/internal/sqlstore/sqltx"

// candidatePolicy is a scheduling policy as the claim's query of candidates
// (ClaimQuery) applies it: exclude appends to the query q, with their
// arguments, the conditions that skip the steps the policy holds back. pol
// is nil where the claim applies no policies (explain), keys nil before the
// claim has met any limit or breaker. What a policy checks of the rows the
// query returned, and what the claim statement does for it, is in its file.
type candidatePolicy interface {
	exclude(q string, args []any, pol *policySet, keys *KeyRoom) (string, []any)
}

// candidatePolicies are the policies of the query of candidates, in the
// order of their conditions: pauses (policies.go), namespace limits, step
// keys (limits.go), breakers (breakerclaim.go) and workflow limits
// (limits.go).
var candidatePolicies = [...]candidatePolicy{pauses{}, namespaceLimits{}, stepKeyLimits{}, breakerHolds{}, workflowLimits{}}

// andIn appends the condition "cond (vals…)" to q and vals to args; with no
// vals, nothing.
func andIn(q string, args []any, cond string, vals []string) (string, []any) {
	if len(vals) == 0 {
		return q, args
	}
	q += ` AND ` + cond + ` (` + sqltx.Placeholders(len(vals)) + `)`
	for _, v := range vals {
		args = append(args, v)
	}
	return q, args
}
