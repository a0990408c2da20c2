package main

import (
	"fmt"
	"io"

	"github.com/weftrun/weft/wire"
)

// printRateChange says what a namespace's rate is after 'weft limit
// --rate'.
func printRateChange(w io.Writer, namespace string, changed bool, p wire.Policy) {
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
func printRates(w io.Writer, rep wire.PolicyReport) {
	rates := rep.RatesInForce()
	if len(rates) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RATE\tLIMIT\tTOKENS\tDEFERRED UNTIL")
	for _, r := range rates {
		deferred := "-"
		if r.DeferredUntil != nil {
			deferred = r.DeferredUntil.Local().Format(timeLayout)
		}
		fmt.Fprintf(w, "%s\t%s\t%.1f\t%s\n", r.Key, r.Rate, r.Tokens, deferred)
	}
}
