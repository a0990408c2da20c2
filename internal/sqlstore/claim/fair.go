package claim

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// This file holds the fair shares: namespace weights (policies.weight) that
// share the claims between the namespaces that have ready work while slots
// are scarce. They are an ordering of the one claim query, used only while
// a weight other than the default is set (policySet.weights):
//
//  1. on PostgreSQL the claim takes a transaction-scoped advisory lock,
//     so that claims under weights follow each other and each counts the
//     steps the one before it claimed (without it, claims at the same
//     moment all see the same namespace below its share and all take it);
//     then one statement finds the namespaces that have ready steps, by a
//     skip scan of steps_ready_namespace (one index probe per namespace,
//     never a read of the ready queue), and counts their running steps
//     (index steps_running) when there are two or more. When that found
//     one namespace alone with ready work, the next claims ask only
//     whether another has any now (FairOthers), and while none has they
//     take neither the lock nor the readiness: there is nothing to share;
//  2. the claim's slots go one by one to a namespace below its share: its
//     running steps, with the slots it was given so far, are fewer than its
//     weight's part of all the running steps of these namespaces plus the
//     claim's slots (a namespace without a weight weighs 1). Running steps
//     are counted in the database, so the share holds across every engine
//     and remote worker, to within one slot. Among the namespaces below
//     their share, the slot goes to the one with the lowest pass, a count
//     of the slots this store gave it, each worth 1/weight (stride
//     scheduling), so that the claims follow the weights even where one
//     slot is all there is: with 2 slots and weights 3:1, say, the running
//     steps can only be 1:1 or 2:0, and the pass makes them 2:0 as often
//     as the weights ask;
//  3. the claim query runs once per namespace given slots, with "namespace =
//     ?" and that many rows, all in one statement (UNION ALL): each
//     namespace's best steps by sort_key, so priority and aging still order
//     the work inside a namespace. Every other policy of the query holds.
//
// Slots a namespace could not use (it had fewer ready steps than it was
// given, or a limit held them back) go to the ordinary query's next round,
// so the claim never leaves a slot empty while work is ready.

// fairLock names the advisory lock of claims under weights (PostgreSQL).
const fairLock = "weft-fair"

// MaxFairNamespaces bounds the skip scan: namespaces past the first this
// many with ready work are claimed by the ordinary rounds only.
const MaxFairNamespaces = 1000

// fairPasses is what a store keeps of the fair shares from one claim to
// the next: the passes of the namespaces it last shared slots between (how
// many slots it gave each, in units of 1/weight, less the smallest, so a
// namespace that comes back starts level with the others), and the
// namespace its last read of the readiness found alone with ready work.
type fairPasses struct {
	mu   sync.Mutex
	pass map[string]float64
	// alone is the namespace the last read of FairReadiness found alone
	// with ready work; "" if it found none or several.
	alone string
}

// lone returns the namespace the last read of FairReadiness found alone
// with ready work, if any.
func (f *fairPasses) lone() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alone
}

// read keeps what a read of FairReadiness found: the namespace alone with
// ready work, or none.
func (f *fairPasses) read(rows []fairRow) {
	alone := ""
	for _, r := range rows {
		if !r.ready {
			continue
		}
		if alone != "" {
			alone = ""
			break
		}
		alone = r.namespace
	}
	f.mu.Lock()
	f.alone = alone
	f.mu.Unlock()
}

// FairOthers asks, in the claim's first statement, whether a namespace
// other than the one the last read of FairReadiness found alone with ready
// work has any now: two descents of steps_ready_namespace, one each side
// of that namespace's entries (each the first entry in the index's order:
// an EXISTS a planner may answer with a scan of the table, which reads it
// all when one namespace has all the ready work).
// While none has, there is nothing to share:
// the claim takes neither the fair shares' lock nor their readiness, and
// its query is the ordinary one. A namespace that gets ready work between
// this statement and the claim's next waits for the next claim, a few
// milliseconds, which the share over a minute does not see.
const FairOthers = `((SELECT namespace FROM steps WHERE state = 'ready' AND namespace <> '' AND namespace > ? ORDER BY namespace LIMIT 1) IS NOT NULL
	OR (SELECT namespace FROM steps WHERE state = 'ready' AND namespace <> '' AND namespace < ? ORDER BY namespace DESC LIMIT 1) IS NOT NULL)`

// fairShare is one namespace with ready work in a claim under weights.
type fairShare struct {
	namespace string
	weight    int
	running   int
	given     int
	pass      float64
}

// FairReadiness finds the namespaces with ready steps and, when there are
// two or more (one takes every slot: there is nothing to share), counts
// their running steps, in one statement.
const FairReadiness = `WITH RECURSIVE ready_ns(n, depth) AS (
	SELECT min(namespace), 1 FROM steps WHERE state = 'ready' AND namespace <> ''
	UNION ALL
	SELECT (SELECT min(namespace) FROM steps WHERE state = 'ready' AND namespace <> '' AND namespace > ready_ns.n), depth + 1
		FROM ready_ns WHERE ready_ns.n IS NOT NULL AND depth < ?
), ready(n) AS (SELECT n FROM ready_ns WHERE n IS NOT NULL)
SELECT 1, n, 0 FROM ready
UNION ALL
SELECT 0, namespace, count(*) FROM steps WHERE state = 'running' AND namespace IN (SELECT n FROM ready) AND (SELECT count(*) FROM ready) > 1
	GROUP BY namespace`

// fairRow is a row of FairReadiness: a namespace with ready steps, or its
// running steps.
type fairRow struct {
	ready     bool
	namespace string
	n         int64
}

// FairReadiness returns the rows of FairReadiness: those the claim's first
// statement read, the first time, or else read now.
func (t *ClaimTx) fairReadiness() ([]fairRow, error) {
	if t.fairRead != nil {
		got := t.fairRead
		t.fairRead = nil
		return got, nil
	}
	if !t.fairLocked && t.H.Dialect.FairReadiness() != "" {
		// The lock and the readiness in one round trip.
		var got []string
		if err := t.QueryRow(`SELECT `+t.H.Dialect.FairReadiness(), fairLock, MaxFairNamespaces).Scan(&got); err != nil {
			return nil, fmt.Errorf("read ready namespaces: %w", err)
		}
		t.fairLocked = true
		return parseFairRows(got)
	}
	if !t.fairLocked {
		if err := t.Lock(fairLock); err != nil {
			return nil, err
		}
		t.fairLocked = true
	}
	rows, err := t.Query(FairReadiness, MaxFairNamespaces)
	if err != nil {
		return nil, fmt.Errorf("count running steps by namespace: %w", err)
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (fairRow, error) {
		var v fairRow
		var kind int64
		err := r.Scan(&kind, &v.namespace, &v.n)
		v.ready = kind == 1
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("count running steps by namespace: %w", err)
	}
	return got, nil
}

// parseFairRows reads the rows of FairReadiness from the claim's first
// statement, as "KIND N NAMESPACE"; never nil.
func parseFairRows(in []string) ([]fairRow, error) {
	out := make([]fairRow, 0, len(in))
	for _, s := range in {
		parts := strings.SplitN(s, " ", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("read ready namespaces: %q is not KIND N NAMESPACE", s)
		}
		n, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read ready namespaces: %q is not KIND N NAMESPACE", s)
		}
		out = append(out, fairRow{ready: parts[0] == "1", namespace: parts[2], n: n})
	}
	return out, nil
}

// fairQuery returns the claim query that shares want slots between the
// namespaces with ready work by weight, or ok false when the ordinary
// query serves: no weight is set, the claim is of one task or namespace,
// or fewer than two namespaces have ready work that this claim may take.
func (t *ClaimTx) fairQuery(want int, p store.ClaimParams, pol *policySet, keys *KeyRoom) (q string, args []any, ok bool, err error) {
	if pol == nil || len(pol.weights) == 0 || p.TaskID != 0 || (p.Namespaces != nil && len(p.Namespaces) < 2) ||
		(p.Handlers != nil && len(p.Handlers) == 0) || t.fairAlone {
		return "", nil, false, nil
	}
	shares, err := t.fairShares(p, pol, keys)
	if err != nil || len(shares) < 2 {
		return "", nil, false, err
	}
	t.Plan.fair.give(shares, want)
	var parts []string
	for _, sh := range shares {
		if sh.given == 0 {
			continue
		}
		one := p
		one.Namespaces = []string{sh.namespace}
		part, partArgs := t.Plan.ClaimQuery(sh.given, one, pol, keys)
		parts = append(parts, FairPart(part))
		args = append(args, partArgs...)
	}
	if len(parts) == 1 {
		return parts[0], args, true, nil
	}
	// Each part is a subquery in FROM: its ORDER BY, LIMIT and (on
	// PostgreSQL) row locks stay its own.
	for i, part := range parts {
		parts[i] = fmt.Sprintf("SELECT * FROM (%s) AS fair%d", part, i)
	}
	return strings.Join(parts, " UNION ALL "), args, true, nil
}

// claimReady is how the claim query begins its conditions.
const claimReady = "WHERE state = 'ready'"

// FairPart makes a claim query one of the fair shares' parts: it names
// the predicate of steps_ready_namespace, which only these parts use (see
// migration 017).
func FairPart(claimQuery string) string {
	return strings.Replace(claimQuery, claimReady, claimReady+" AND namespace <> ''", 1)
}

// fairShares reads the namespaces with ready work that the claim may take,
// with their running steps and weights, ordered by name.
func (t *ClaimTx) fairShares(p store.ClaimParams, pol *policySet, keys *KeyRoom) ([]fairShare, error) {
	got, err := t.fairReadiness()
	if err != nil {
		return nil, err
	}
	t.Plan.fair.read(got)
	running := map[string]int{}
	var shares []fairShare
	var fullNS []string
	if keys != nil {
		fullNS = full(keys.ns)
	}
	for _, r := range got {
		switch {
		case !r.ready:
			running[r.namespace] = int(r.n)
		case p.Namespaces != nil && !slices.Contains(p.Namespaces, r.namespace),
			slices.Contains(pol.namespaces, r.namespace), // paused
			slices.Contains(fullNS, r.namespace):         // at its limit
		default:
			w := pol.weights[r.namespace]
			if w < 1 {
				w = 1
			}
			shares = append(shares, fairShare{namespace: r.namespace, weight: w})
		}
	}
	for i := range shares {
		shares[i].running = running[shares[i].namespace]
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].namespace < shares[j].namespace })
	return shares, nil
}

// give hands want slots out between shares, one at a time, to the share
// below its part of the slots with the lowest pass; and keeps the passes
// for the next claim.
func (f *fairPasses) give(shares []fairShare, want int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range shares {
		// A namespace new to the share (or back after a pause in its
		// work) starts at 0, the lowest pass of those that stayed.
		shares[i].pass = f.pass[shares[i].namespace]
	}
	total, weights := want, 0
	for _, sh := range shares {
		total += sh.running
		weights += sh.weight
	}
	for range want {
		best := -1
		for i, sh := range shares {
			// Below its part: (running + given) < total * weight / weights.
			// One always is: the parts add up to total, and fewer than
			// total slots are running or given.
			if (sh.running+sh.given)*weights < total*sh.weight && (best < 0 || fairBefore(sh, shares[best])) {
				best = i
			}
		}
		shares[best].given++
		shares[best].pass += 1 / float64(shares[best].weight)
	}
	low := shares[0].pass
	for _, sh := range shares[1:] {
		low = min(low, sh.pass)
	}
	// Only the namespaces of this claim are kept: the map stays as small
	// as the set of namespaces with ready work.
	f.pass = make(map[string]float64, len(shares))
	for _, sh := range shares {
		f.pass[sh.namespace] = sh.pass - low
	}
}

// fairBefore reports whether a should have the next slot before b: the
// lower pass, then the fewer running and given steps for its weight, then
// the first name.
func fairBefore(a, b fairShare) bool {
	// Passes are sums of 1/weight: equal within rounding is equal.
	if d := a.pass - b.pass; d < -1e-9 || d > 1e-9 {
		return d < 0
	}
	// (a.running + a.given) / a.weight < (b.running + b.given) / b.weight
	if l, r := (a.running+a.given)*b.weight, (b.running+b.given)*a.weight; l != r {
		return l < r
	}
	return a.namespace < b.namespace
}
