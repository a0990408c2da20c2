package sqlite_test

import (
	"testing"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/storetest"
)

// BenchmarkSubmit: see storetest.BenchmarkSubmit.
func BenchmarkSubmit(b *testing.B) {
	storetest.BenchmarkSubmit(b, func(tb testing.TB) store.Store { return openStore(tb) })
}

// BenchmarkComplete: see storetest.BenchmarkComplete.
func BenchmarkComplete(b *testing.B) {
	storetest.BenchmarkComplete(b, func(tb testing.TB) store.Store { return openStore(tb) })
}

// BenchmarkClaimBreakers: see storetest.BenchmarkClaimBreakers.
func BenchmarkClaimBreakers(b *testing.B) {
	storetest.BenchmarkClaimBreakers(b, func(tb testing.TB) store.Store { return openStore(tb) })
}
