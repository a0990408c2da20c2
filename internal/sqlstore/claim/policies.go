package claim

import (
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// This file holds the operator's scheduling policies: setting them (with
// their audit), listing them with their usage, and the copy the claim
// applies, read again only when the policy version moved.

// policySet is what the claim applies: the paused targets and the
// namespace limits, as of one policy version. It is never modified once
// built, so claims share it.
type policySet struct {
	Version    int64
	All        bool        // everything is paused
	namespaces []string    // paused namespaces
	workflows  [][2]string // paused workflows: namespace, name
	caps       map[string]int
	weights    map[string]int        // namespace weights other than the default (fair.go); nil: none
	rates      map[string]store.Rate // namespace rates
	// breakers are the circuit breakers that are not closed: when each
	// may probe (µs; see breakers.go).
	breakers map[string]int64
	// wary are the closed breakers that counted failures: their steps
	// are claimed only while the failures they may add stay below the
	// threshold (breakers.go).
	wary map[string]bool
}

// capsWith returns the namespace limits of the database merged with an
// engine's own (the smaller wins).
func (p *policySet) capsWith(own map[string]int) map[string]int {
	if len(p.caps) == 0 {
		return own
	}
	if len(own) == 0 {
		return p.caps
	}
	out := make(map[string]int, len(p.caps)+len(own))
	for ns, n := range p.caps {
		out[ns] = n
	}
	for ns, n := range own {
		if m, ok := out[ns]; !ok || n < m {
			out[ns] = n
		}
	}
	return out
}

// cachedPolicies returns the policies last read, or nil. A claim reads
// them once, before its first statement: what it predicts from them
// (bounds, weights, its query sent ahead) holds if that statement finds
// their version still current.
func (s *Planner) cachedPolicies() *policySet {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.policyCache
}

// policies returns the policies as of version, from the cache when it holds
// that version, else read in t (and cached).
func (t *ClaimTx) policies(version int64) (*policySet, error) {
	pl := t.Plan
	pl.policyMu.Lock()
	cached := pl.policyCache
	pl.policyMu.Unlock()
	if cached != nil && cached.Version == version {
		return cached, nil
	}
	rows, err := t.Query(`SELECT target, paused, concurrency, weight, rate_n, rate_per FROM policies WHERE paused != 0 OR concurrency > 0 OR weight > 1 OR rate_n > 0`)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	type row struct {
		target      string
		paused      bool
		concurrency int
		weight      int
		rate        store.Rate
	}
	all, err := sqldb.Collect(rows, func(r sqldb.Row) (row, error) {
		var v row
		var paused, ratePer int64
		err := r.Scan(&v.target, &paused, &v.concurrency, &v.weight, &v.rate.Limit, &ratePer)
		v.rate.Per = time.Duration(ratePer) * time.Microsecond
		v.paused = paused != 0
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	p := &policySet{Version: version}
	for _, r := range all {
		ns, name, err := store.ParseTarget(r.target)
		if err != nil {
			continue // not written by SetPolicy; never applied
		}
		switch {
		case r.paused && r.target == store.TargetAll:
			p.All = true
		case r.paused && name == "":
			p.namespaces = append(p.namespaces, ns)
		case r.paused:
			p.workflows = append(p.workflows, [2]string{ns, name})
		}
		if r.concurrency > 0 && name == "" && ns != "" {
			if p.caps == nil {
				p.caps = map[string]int{}
			}
			p.caps[ns] = r.concurrency
		}
		if r.weight > 1 && name == "" && ns != "" {
			if p.weights == nil {
				p.weights = map[string]int{}
			}
			p.weights[ns] = r.weight
		}
		if r.rate.Validate() == nil && !r.rate.IsZero() && name == "" && ns != "" {
			if p.rates == nil {
				p.rates = map[string]store.Rate{}
			}
			p.rates[ns] = r.rate
		}
	}
	if err := (breakerClaim{t}).readBreakers(p); err != nil {
		return nil, err
	}
	pl.policyMu.Lock()
	if pl.policyCache == nil || pl.policyCache.Version <= version {
		pl.policyCache = p
	}
	pl.policyMu.Unlock()
	return p, nil
}

// PolicyColumns are the columns of a policies row that ScanPolicy reads.
const PolicyColumns = `target, paused, concurrency, weight, updated_at, updated_by, rate_n, rate_per`

func ScanPolicy(r sqldb.Row) (store.Policy, error) {
	var p store.Policy
	var paused, at, ratePer int64
	var rate store.Rate
	err := r.Scan(&p.Target, &paused, &p.Concurrency, &p.Weight, &at, &p.UpdatedBy, &rate.Limit, &ratePer)
	if rate.Limit > 0 {
		rate.Per = time.Duration(ratePer) * time.Microsecond
		p.Rate = &rate
	}
	p.Paused = paused != 0
	p.UpdatedAt = time.UnixMicro(at)
	return p, err
}

// pauses skips the steps of paused namespaces and workflows.
type pauses struct{}

func (pauses) exclude(q string, args []any, pol *policySet, _ *KeyRoom) (string, []any) {
	if pol == nil {
		return q, args
	}
	q, args = andIn(q, args, `namespace NOT IN`, pol.namespaces)
	for _, wf := range pol.workflows {
		q += ` AND NOT (namespace = ? AND workflow = ?)`
		args = append(args, wf[0], wf[1])
	}
	return q, args
}
