package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// A grant is a permission and the namespaces it holds in:
// "tasks:read@shop,billing" in shop and billing, "tasks:read@*" or
// "tasks:read" in every namespace.

// AllNamespaces is the scope of a grant that holds in every namespace.
const AllNamespaces = "*"

// Scope is where a credential may use one permission: every namespace,
// some, or none.
type Scope struct {
	// All: in every namespace, those to come included.
	All bool
	// Namespaces, sorted, when not All.
	Namespaces []string
}

// Has reports whether the scope holds in namespace ns.
func (s Scope) Has(ns string) bool {
	if s.All {
		return true
	}
	_, ok := slices.BinarySearch(s.Namespaces, ns)
	return ok
}

// None reports whether the scope holds nowhere: the permission is not
// granted at all.
func (s Scope) None() bool { return !s.All && len(s.Namespaces) == 0 }

// Filter is the scope as a store filter's Namespaces (TaskFilter,
// HistoryQuery): nil for every namespace.
func (s Scope) Filter() []string {
	if s.All {
		return nil
	}
	return s.Namespaces
}

// String is the scope as a grant writes it: "*" or "shop,billing".
func (s Scope) String() string {
	if s.All {
		return AllNamespaces
	}
	return strings.Join(s.Namespaces, ",")
}

// ParseGrant splits a grant into its permission and its namespaces (nil
// for every namespace), checking both.
func ParseGrant(g string) (perm string, namespaces []string, err error) {
	perm, scope, scoped := strings.Cut(g, "@")
	if err := ValidatePermission(perm); err != nil {
		return "", nil, err
	}
	if !scoped || scope == AllNamespaces {
		return perm, nil, nil
	}
	if scope == "" {
		return "", nil, fmt.Errorf("%q: no namespace after '@' (want PERMISSION@NAMESPACE,... or PERMISSION@*)", g)
	}
	namespaces = strings.Split(scope, ",")
	if err := workflow.CheckNames(namespaces); err != nil {
		var ne *workflow.NameError
		if errors.As(err, &ne) && ne.Name == AllNamespaces {
			return "", nil, fmt.Errorf("%q: '*' stands alone, for every namespace", g)
		}
		return "", nil, fmt.Errorf("%q: %w", g, err)
	}
	return perm, namespaces, nil
}

// ValidateGrant checks a grant: a known permission, optionally followed by
// "@" and the namespaces it holds in.
func ValidateGrant(g string) error {
	_, _, err := ParseGrant(g)
	return err
}

// ScopeOf returns where the grants allow need: the union of the scopes of
// every grant of need, of its resource's wildcard and of admin:*. A grant
// that does not parse grants nothing.
func ScopeOf(grants []string, need string) Scope {
	res, _, _ := strings.Cut(need, ":")
	return scopeWhere(grants, func(perm string) bool { return perm == need || perm == PermAdmin || perm == res+":*" })
}

// scopeWhere is the union of the scopes of the grants whose permission
// keep keeps.
func scopeWhere(grants []string, keep func(perm string) bool) Scope {
	var s Scope
	for _, g := range grants {
		perm, nss, err := ParseGrant(g)
		if err != nil || !keep(perm) {
			continue
		}
		if nss == nil {
			return Scope{All: true}
		}
		s.Namespaces = append(s.Namespaces, nss...)
	}
	slices.Sort(s.Namespaces)
	s.Namespaces = slices.Compact(s.Namespaces)
	return s
}

// Allowed reports whether the grants allow need in at least one namespace.
func Allowed(grants []string, need string) bool { return !ScopeOf(grants, need).None() }

// ScopeGrants applies namespaces to every grant that names none: the grants
// of "weft keys create --namespaces" and of a token's namespaces claim.
// With no namespaces the grants are returned as they are.
func ScopeGrants(grants, namespaces []string) ([]string, error) {
	if len(namespaces) == 0 {
		return grants, nil
	}
	if slices.Contains(namespaces, AllNamespaces) {
		if len(namespaces) > 1 {
			return nil, errors.New("namespaces: '*' stands alone, for every namespace")
		}
		return grants, nil
	}
	if err := workflow.CheckNames(namespaces); err != nil {
		return nil, fmt.Errorf("namespaces: %w", err)
	}
	out := make([]string, len(grants))
	for i, g := range grants {
		if strings.Contains(g, "@") {
			out[i] = g
			continue
		}
		out[i] = g + "@" + strings.Join(namespaces, ",")
	}
	return out, nil
}

// SplitGrants reads a comma-separated list of grants, where a grant's
// namespaces are comma-separated too: a part without ':' is one more
// namespace of the grant before it ("tasks:read@shop,billing,tasks:create"
// is two grants). Namespaces never hold ':'.
func SplitGrants(list string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.Contains(part, ":"):
			out = append(out, part)
		case len(out) > 0 && strings.Contains(out[len(out)-1], "@"):
			out[len(out)-1] += "," + part
		default:
			return nil, fmt.Errorf("%q is not a permission (want RESOURCE:ACTION[@NAMESPACE,...])", part)
		}
	}
	return out, nil
}

// Visible keeps the items whose namespace the scope holds.
func Visible[T any](sc Scope, items []T, namespace func(T) string) []T {
	if sc.All {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if sc.Has(namespace(it)) {
			out = append(out, it)
		}
	}
	return out
}

// VisiblePolicies keeps the policies, limits, rates and breakers of a
// report whose namespace the scope holds.
func VisiblePolicies(sc Scope, rep store.PolicyReport) store.PolicyReport {
	rep.Policies = Visible(sc, rep.Policies, func(p store.Policy) string { return targetNamespace(p.Target) })
	rep.Limits = Visible(sc, rep.Limits, func(l store.LimitUsage) string { return keyNamespace(l.Key) })
	rep.Rates = Visible(sc, rep.Rates, func(u store.RateUsage) string { return keyNamespace(u.Key) })
	rep.Breakers = Visible(sc, rep.Breakers, func(b store.Breaker) string { return targetNamespace(b.Key) })
	return rep
}

// VisiblePolicyChanges keeps the changes whose target's namespace the
// scope holds.
func VisiblePolicyChanges(sc Scope, changes []store.PolicyChangeRecord) []store.PolicyChangeRecord {
	return Visible(sc, changes, func(c store.PolicyChangeRecord) string { return targetNamespace(c.Target) })
}

// VisibleWorkers keeps the engines and remote workers a principal may see
// with scope sc: every one in every namespace; else, since engines and
// workers serve whatever namespace they are asked to, only the remote
// workers the principal registered itself.
func VisibleWorkers(sc Scope, p Principal, ws []store.EngineInfo) []store.EngineInfo {
	if sc.All {
		return ws
	}
	mine := p.Owner()
	return slices.DeleteFunc(ws, func(w store.EngineInfo) bool { return !w.Worker || w.Owner != mine })
}

// targetNamespace is the namespace of "NAMESPACE[/...]" ("" for "*").
func targetNamespace(target string) string {
	if target == store.TargetAll {
		return ""
	}
	ns, _, _ := strings.Cut(target, "/")
	return ns
}

// keyNamespace is the namespace of a limit's or a rate's key:
// "step:NS/WORKFLOW/STEP", "workflow:NS/WORKFLOW" or "ns:NAMESPACE", each
// perhaps followed by "=VALUE".
func keyNamespace(key string) string {
	_, rest, _ := strings.Cut(key, ":")
	rest, _, _ = strings.Cut(rest, "=")
	return targetNamespace(rest)
}
