package cliview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Policies writes the policy report of `weft policies`: the policies set,
// with their namespaces' weights and running steps, then the templates'
// concurrency limits, the rates in force and the circuit breakers, each
// table only when it has rows.
func Policies(w io.Writer, rep wire.PolicyReport) error {
	w = printable{w}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(rep.Policies) == 0 {
		fmt.Fprintln(tw, "no policies set: nothing paused, no namespace limits, rates or weights")
	} else {
		fmt.Fprintln(tw, "TARGET\tPAUSED\tCONCURRENCY\tWEIGHT\tRUNNING\tCHANGED\tBY")
		for _, p := range rep.Policies {
			paused, conc, weight, running := "no", "-", "-", "-"
			if p.Paused {
				paused = "yes"
			}
			if p.Concurrency > 0 {
				conc = strconv.Itoa(p.Concurrency)
			}
			if p.Target != store.TargetAll && !strings.Contains(p.Target, "/") {
				running = strconv.Itoa(p.Running)
				weight = strconv.Itoa(max(p.Weight, 1))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Target, paused, conc, weight, running, p.UpdatedAt.Local().Format(timeLayout), p.UpdatedBy)
		}
	}
	if len(rep.Limits) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "TEMPLATE LIMIT\tLIMIT\tRUNNING")
		for _, l := range rep.Limits {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", l.Key, l.Limit, l.Running)
		}
	}
	rates(tw, rep)
	breakers(tw, rep.Breakers)
	return tw.Flush()
}

// PolicyChanges writes the changes of policies of `weft policies
// --history`, in the order given.
func PolicyChanges(w io.Writer, changes []wire.PolicyChangeRecord) error {
	w = printable{w}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tTARGET\tCHANGE\tBY\tREASON")
	for _, c := range changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.At.Local().Format(timeLayout), c.Target, c.Change, c.Actor, c.Reason)
	}
	return tw.Flush()
}

// Limits writes what `weft limit` set on a namespace, one line for each of
// the concurrency limit, rate and weight the change ch gave, as the
// namespace's policy p holds them now.
func Limits(w io.Writer, ch wire.PolicyChange, p wire.Policy) {
	w = printable{w}
	namespace := ch.Target
	switch {
	case ch.Concurrency == nil:
	case p.Concurrency == 0:
		fmt.Fprintf(w, "%s: no concurrency limit\n", namespace)
	default:
		fmt.Fprintf(w, "%s: at most %d steps at once (%d running)\n", namespace, p.Concurrency, p.Running)
	}
	if ch.Rate != nil {
		namespaceRate(w, namespace, p)
	}
	switch {
	case ch.Weight == nil:
	case p.Weight == 0:
		fmt.Fprintf(w, "%s: weight 1 (the default)\n", namespace)
	default:
		fmt.Fprintf(w, "%s: weight %d in the fair shares (%d running)\n", namespace, p.Weight, p.Running)
	}
}

// namespaceRate writes a namespace's rate after a change: none, or its
// limit and the tokens its bucket holds now.
func namespaceRate(w io.Writer, namespace string, p wire.Policy) {
	if p.Rate == nil {
		fmt.Fprintf(w, "%s: no rate limit\n", namespace)
		return
	}
	tokens := float64(p.Rate.Limit)
	if p.Tokens != nil {
		tokens = *p.Tokens
	}
	fmt.Fprintf(w, "%s: at most %d claims per %s, in bursts of up to %d (%.1f tokens now)\n",
		namespace, p.Rate.Limit, p.Rate.Per, p.Rate.Limit, tokens)
}

// rates lists the rates in force: the namespaces' and the buckets of the
// rates templates define, with their tokens now and, while steps wait for
// a token, the latest time one was deferred to.
func rates(w io.Writer, rep wire.PolicyReport) {
	inForce := rep.RatesInForce()
	if len(inForce) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RATE\tLIMIT\tTOKENS\tDEFERRED UNTIL")
	for _, r := range inForce {
		deferred := "-"
		if r.DeferredUntil != nil {
			deferred = r.DeferredUntil.Local().Format(timeLayout)
		}
		fmt.Fprintf(w, "%s\t%s\t%.1f\t%s\n", r.Key, r.Rate, r.Tokens, deferred)
	}
}

// breakers lists the circuit breakers of a policy report.
func breakers(w io.Writer, bs []wire.Breaker) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "BREAKER\tSTATE\tFAILURES\tOPENED\tPROBE FROM")
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Local().Format(timeLayout)
	}
	for _, b := range bs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", b.Key, b.State, strconv.Itoa(b.Failures)+"/"+strconv.Itoa(b.Threshold),
			when(b.OpenedAt), when(b.RetryAt))
	}
}
