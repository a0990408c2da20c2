// Package version is weft's version and module path, where the root
// package reads them, and the OpenTelemetry instrumentation scope named
// after them, which the engine and the built-in handlers trace under.
package version

import "go.opentelemetry.io/otel/trace"

// Number is the version of this weft module.
const Number = "0.1.0"

// Module is weft's module path, also the name of its instrumentation
// scope.
const Module = "github.com/weftrun/weft"

// Tracer returns weft's tracer from tp: the scope Module at Number.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer(Module, trace.WithInstrumentationVersion(Number))
}
