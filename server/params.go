package server

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/weftrun/weft/internal/textsafe"
)

// This file holds what every route checks of its URL before its handler
// runs: the query parameters it takes, and text that no store can hold.

// unknownParam is the answer to a query parameter a route does not take.
func unknownParam(name string) *apiError {
	name = textsafe.String(name)
	return &apiError{Status: http.StatusBadRequest, Code: CodeUnknownField, Field: name, Message: name + ": unknown query parameter"}
}

// checkURL refuses a request whose URL has a query parameter outside
// accepted (every parameter, when accepted is nil and any is set), or a
// query value or path segment (a {name} of pattern) holding a NUL character
// or bytes that are not UTF-8: PostgreSQL cannot compare such text, so it
// must not reach the store. The field of the error names the parameter.
func checkURL(r *http.Request, pattern string, accepted []string, any bool) *apiError {
	for _, name := range patternParams(pattern) {
		if err := textsafe.Check(r.PathValue(name)); err != nil {
			return fieldError(name, "%v", err)
		}
	}
	q := r.URL.Query()
	for k := range q {
		if !any && !slices.Contains(accepted, k) {
			return unknownParam(k)
		}
	}
	return checkValues(q)
}

// checkValues refuses query parameters (a REST URL's, or a gRPC
// message's passed as parameters) whose name or value holds a NUL
// character or bytes that are not UTF-8.
func checkValues(q url.Values) *apiError {
	for k, vs := range q {
		if err := textsafe.Check(k); err != nil {
			return fieldError(textsafe.String(k), "the parameter's name %v", err)
		}
		for _, v := range vs {
			if err := textsafe.Check(v); err != nil {
				return fieldError(k, "%v", err)
			}
		}
	}
	return nil
}

// CheckURL refuses (400, an error for ErrorStatus) a request whose query
// values or path segments ({name} segments of pattern, a ServeMux pattern)
// hold a NUL character or bytes that are not UTF-8, naming the parameter.
// The dashboard's pages call it as the API's routes do.
func CheckURL(r *http.Request, pattern string) error {
	if ae := checkURL(r, pattern, nil, true); ae != nil {
		return ae
	}
	return nil
}

// patternParams lists the {name} segments of a ServeMux pattern.
func patternParams(pattern string) []string {
	var out []string
	for {
		i := strings.IndexByte(pattern, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(pattern[i:], '}')
		if j < 0 {
			return out
		}
		name := strings.TrimSuffix(pattern[i+1:i+j], "...")
		if name != "$" {
			out = append(out, name)
		}
		pattern = pattern[i+j+1:]
	}
}
