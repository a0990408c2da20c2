package main

import (
	"fmt"
	"io"
	"time"

	"github.com/weftrun/weft"
)

// printRateChange says what a namespace's rate is after 'weft limit
// --rate'.
func printRateChange(w io.Writer, namespace string, changed bool, p weft.Policy) {
	switch {
	case !changed:
	case p.Rate == nil:
		fmt.Fprintf(w, "%s: no rate limit\n", namespace)
	default:
		tokens := float64(p.Rate.Limit)
		if p.Tokens != nil {
			tokens = *p.Tokens
		}
		fmt.Fprintf(w, "%s: at most %d claims per %s, in bursts of up to %d (%.1f tokens now)\n",
			namespace, p.Rate.Limit, p.Rate.Per, p.Rate.Limit, tokens)
	}
}

// printRates lists the rates in force: the namespaces' and the buckets of
// the rates templates define, with their tokens now and, while steps wait
// for a token, the latest time one was deferred to.
func printRates(w io.Writer, rep weft.PolicyReport) {
	header := false
	row := func(name string, rate weft.Rate, tokens float64, until *time.Time) {
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "RATE\tLIMIT\tTOKENS\tDEFERRED UNTIL")
			header = true
		}
		deferred := "-"
		if until != nil {
			deferred = until.Local().Format(timeLayout)
		}
		fmt.Fprintf(w, "%s\t%s\t%.1f\t%s\n", name, rate, tokens, deferred)
	}
	for _, p := range rep.Policies {
		if p.Rate != nil && p.Tokens != nil {
			row(p.Target, *p.Rate, *p.Tokens, nil)
		}
	}
	for _, r := range rep.Rates {
		row(r.Key, r.Rate, r.Tokens, r.DeferredUntil)
	}
}
