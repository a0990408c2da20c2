// Package outbound holds the transport of the HTTP requests weft sends on
// its own behalf (webhook deliveries, http steps).
package outbound

import "net/http"

// Transport returns a transport of its own, set as http.DefaultTransport
// is. Anything in the process may close http.DefaultTransport's idle
// connections (every httptest.Server's Close does), and one closed just as
// a request takes it breaks that request after the receiver may have had
// it: a webhook's event or an http step's POST would then go again. Where
// http.DefaultTransport was replaced with another kind, a transport that
// uses the environment's proxy.
func Transport() *http.Transport {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return t.Clone()
	}
	return &http.Transport{Proxy: http.ProxyFromEnvironment}
}
