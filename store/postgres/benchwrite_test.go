package postgres_test

import (
	"testing"

	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/store/storetest"
)

func openBench(tb testing.TB) store.Store { return pgtesting.Open(tb, postgres.Options{MaxConns: 4}) }

// BenchmarkSubmit: see storetest.BenchmarkSubmit.
func BenchmarkSubmit(b *testing.B) { storetest.BenchmarkSubmit(b, openBench) }

// BenchmarkComplete: see storetest.BenchmarkComplete.
func BenchmarkComplete(b *testing.B) { storetest.BenchmarkComplete(b, openBench) }

// BenchmarkClaimBreakers: see storetest.BenchmarkClaimBreakers.
func BenchmarkClaimBreakers(b *testing.B) { storetest.BenchmarkClaimBreakers(b, openBench) }
