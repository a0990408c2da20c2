package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/store"
)

// This file holds the operator's scheduling policies: setting them (with
// their audit), listing them with their usage, and the copy the claim
// applies, read again only when the policy version moved.

// policySet is what the claim applies: the paused targets and the
// namespace limits, as of one policy version. It is never modified once
// built, so claims share it.
type policySet struct {
	version    int64
	all        bool        // everything is paused
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
func (s *planner) cachedPolicies() *policySet {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.policyCache
}

// policies returns the policies as of version, from the cache when it holds
// that version, else read in t (and cached).
func (t *claimTx) policies(version int64) (*policySet, error) {
	s := t.s
	s.plan.policyMu.Lock()
	cached := s.plan.policyCache
	s.plan.policyMu.Unlock()
	if cached != nil && cached.version == version {
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
	p := &policySet{version: version}
	for _, r := range all {
		ns, name, err := store.ParseTarget(r.target)
		if err != nil {
			continue // not written by SetPolicy; never applied
		}
		switch {
		case r.paused && r.target == store.TargetAll:
			p.all = true
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
	s.plan.policyMu.Lock()
	if s.plan.policyCache == nil || s.plan.policyCache.version <= version {
		s.plan.policyCache = p
	}
	s.plan.policyMu.Unlock()
	return p, nil
}

// SetPolicy applies a change to one target and audits it.
func (s *claims) SetPolicy(ctx context.Context, c store.PolicyChange) (store.Policy, error) {
	if err := c.Validate(); err != nil {
		return store.Policy{}, err
	}
	var out store.Policy
	err := s.write(ctx, "", func(t *txn) error {
		at := t.Now
		if !c.At.IsZero() {
			at = c.At.UnixMicro()
		}
		// The version row first: changes of policies are serialised by
		// its lock, and every claim after this commit reads them again.
		if err := t.movePolicyVersion(); err != nil {
			return err
		}
		var paused, concurrency, weight, rateN, ratePer any
		if c.Paused != nil {
			p := 0
			if *c.Paused {
				p = 1
			}
			paused = p
		}
		if c.Concurrency != nil {
			concurrency = *c.Concurrency
		}
		if c.Weight != nil {
			weight = *c.Weight
			if *c.Weight == 1 {
				weight = 0 // the default, as if never set
			}
		}
		if c.Rate != nil {
			rateN, ratePer = c.Rate.Limit, c.Rate.Per.Microseconds()
		}
		// COALESCE keeps what the change leaves alone.
		_, err := t.Exec(`INSERT INTO policies (target, paused, concurrency, weight, rate_n, rate_per, updated_at, updated_by)
			VALUES (?, COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0), COALESCE(CAST(? AS BIGINT), 0), ?, ?)
			ON CONFLICT (target) DO UPDATE SET paused = COALESCE(?, policies.paused), concurrency = COALESCE(?, policies.concurrency),
			weight = COALESCE(?, policies.weight), rate_n = COALESCE(?, policies.rate_n), rate_per = COALESCE(CAST(? AS BIGINT), policies.rate_per),
			updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			c.Target, paused, concurrency, weight, rateN, ratePer, at, c.Actor, paused, concurrency, weight, rateN, ratePer)
		if err != nil {
			return fmt.Errorf("set policy of %s: %w", c.Target, err)
		}
		if err := t.recordPolicyChange(at, c.Actor, c.Target, c.Describe(), c.Reason); err != nil {
			return err
		}
		// A target with nothing set is forgotten; its audit stays.
		if _, err := t.Exec(`DELETE FROM policies WHERE target = ? AND paused = 0 AND concurrency = 0 AND weight = 0 AND rate_n = 0`, c.Target); err != nil {
			return fmt.Errorf("set policy of %s: %w", c.Target, err)
		}
		if (c.Paused != nil && !*c.Paused) || c.Concurrency != nil || c.Weight != nil || c.Rate != nil {
			// Work may be claimable now: wake the engines, here and (on
			// PostgreSQL) elsewhere, as new ready steps would.
			t.Readied++
		}
		pols, err := t.readPolicies(`WHERE target = ?`, c.Target)
		if err != nil {
			return err
		}
		if err := policyTokens(pols, t.Now, t.Query); err != nil {
			return err
		}
		out = store.Policy{Target: c.Target, UpdatedAt: time.UnixMicro(at), UpdatedBy: c.Actor}
		if len(pols) == 1 {
			out = pols[0]
		}
		return nil
	})
	if err != nil {
		return store.Policy{}, err
	}
	return out, nil
}

// movePolicyVersion moves the policy version: every claim after this
// transaction commits reads the policies again.
func (t *operatorTx) movePolicyVersion() error {
	if _, err := t.Exec(`UPDATE policy_version SET version = version + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("move the policy version: %w", err)
	}
	return nil
}

// recordPolicyChange writes one entry of the policy audit.
func (t *operatorTx) recordPolicyChange(at int64, actor, target, change, reason string) error {
	if _, err := t.Exec(`INSERT INTO policy_changes (at, actor, target, change, reason) VALUES (?, ?, ?, ?, ?)`,
		at, actor, target, change, reason); err != nil {
		return fmt.Errorf("audit policy change of %s: %w", target, err)
	}
	return nil
}

// readPolicies reads policies rows with a WHERE clause.
func (t *operatorTx) readPolicies(where string, args ...any) ([]store.Policy, error) {
	rows, err := t.Query(`SELECT `+policyColumns+` FROM policies `+where+` ORDER BY target`, args...)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	pols, err := sqldb.Collect(rows, scanPolicy)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	return pols, nil
}

// policyColumns are the columns of a policies row that scanPolicy reads.
const policyColumns = `target, paused, concurrency, weight, updated_at, updated_by, rate_n, rate_per`

func scanPolicy(r sqldb.Row) (store.Policy, error) {
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

// ListPolicies returns the policies set and the usage of the limits in force.
func (s *claims) ListPolicies(ctx context.Context) (store.PolicyReport, error) {
	rows, err := s.Read(ctx, `SELECT `+policyColumns+` FROM policies ORDER BY target`)
	if err != nil {
		return store.PolicyReport{}, fmt.Errorf("list policies: %w", err)
	}
	pols, err := sqldb.Collect(rows, scanPolicy)
	if err != nil {
		return store.PolicyReport{}, fmt.Errorf("list policies: %w", err)
	}
	var names []any
	for _, p := range pols {
		if ns, name, err := store.ParseTarget(p.Target); err == nil && ns != "" && name == "" {
			names = append(names, ns)
		}
	}
	if len(names) > 0 {
		rows, err := s.Read(ctx, `SELECT namespace, count(*) FROM steps WHERE state = 'running' AND namespace IN (`+sqltx.Placeholders(len(names))+`) GROUP BY namespace`, names...)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count running steps: %w", err)
		}
		running, err := sqldb.Collect(rows, scanNamespaceRow)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count running steps: %w", err)
		}
		for _, r := range running {
			for i := range pols {
				if pols[i].Target == r.namespace {
					pols[i].Running = int(r.n)
				}
			}
		}
	}
	report := store.PolicyReport{Policies: pols, Limits: []store.LimitUsage{}}
	if report.Policies == nil {
		report.Policies = []store.Policy{}
	}
	// The limits templates define, for the keys that have work running.
	for _, q := range []string{
		`SELECT limit_key, max(limit_n), count(*) FROM steps WHERE state = 'running' AND limit_key != '' GROUP BY limit_key`,
		// A task's limit is on its steps until it starts; a running task
		// holds one place of it.
		`SELECT limit_key, max(limit_n), count(*) FROM tasks WHERE state = 'running' AND limit_key != '' GROUP BY limit_key`,
	} {
		rows, err := s.Read(ctx, q)
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count limit usage: %w", err)
		}
		used, err := sqldb.Collect(rows, func(r sqldb.Row) (store.LimitUsage, error) {
			var u store.LimitUsage
			var limit sql.NullInt64
			err := r.Scan(&u.Key, &limit, &u.Running)
			u.Limit = int(limit.Int64)
			return u, err
		})
		if err != nil {
			return store.PolicyReport{}, fmt.Errorf("count limit usage: %w", err)
		}
		report.Limits = append(report.Limits, used...)
	}
	sort.Slice(report.Limits, func(i, j int) bool { return report.Limits[i].Key < report.Limits[j].Key })
	if err := s.reportRates(ctx, &report); err != nil {
		return store.PolicyReport{}, err
	}
	if report.Breakers, err = s.ListBreakers(ctx); err != nil {
		return store.PolicyReport{}, err
	}
	return report, nil
}

// PolicyChanges returns the most recent policy changes, newest first.
func (s *claims) PolicyChanges(ctx context.Context, limit int) ([]store.PolicyChangeRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.Read(ctx, `SELECT id, at, actor, target, change, reason FROM policy_changes ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list policy changes: %w", err)
	}
	out, err := sqldb.Collect(rows, func(r sqldb.Row) (store.PolicyChangeRecord, error) {
		var c store.PolicyChangeRecord
		var at int64
		err := r.Scan(&c.ID, &at, &c.Actor, &c.Target, &c.Change, &c.Reason)
		c.At = time.UnixMicro(at)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list policy changes: %w", err)
	}
	return out, nil
}

// pauses skips the steps of paused namespaces and workflows.
type pauses struct{}

func (pauses) exclude(q string, args []any, pol *policySet, _ *keyRoom) (string, []any) {
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
