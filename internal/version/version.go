// Package version is weft's version, where the root package and the
// engine's instrumentation both read it.
package version

// Number is the version of this weft module.
const Number = "0.1.0"
