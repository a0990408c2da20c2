package sqldb

import (
	"strconv"
	"strings"
	"sync"
)

// Binder rewrites the "?" placeholders the store's queries are written with
// into the database's own: unchanged, or numbered $1, $2, … . Each query's
// numbered form is made once and kept.
type Binder struct {
	numbered bool
	rebound  sync.Map // query with ? placeholders -> numbered form
}

// NewBinder returns a Binder that numbers the placeholders if numbered.
func NewBinder(numbered bool) *Binder { return &Binder{numbered: numbered} }

// Bind returns q with the database's placeholders.
func (b *Binder) Bind(q string) string {
	if !b.numbered {
		return q
	}
	if v, ok := b.rebound.Load(q); ok {
		return v.(string)
	}
	var sb strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			sb.WriteByte('$')
			sb.WriteString(strconv.Itoa(n))
		} else {
			sb.WriteByte(q[i])
		}
	}
	b.rebound.Store(q, sb.String())
	return sb.String()
}
