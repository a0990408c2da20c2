package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// readCountingStore serves one workflow version and counts the reads of
// it; each read waits for release, and the first fails where failFirst.
type readCountingStore struct {
	store.Store
	def       json.RawMessage
	reads     atomic.Int32
	release   chan struct{}
	failFirst bool
}

func (s *readCountingStore) GetWorkflow(ctx context.Context, namespace, name, version string) (*store.WorkflowRecord, error) {
	n := s.reads.Add(1)
	<-s.release
	if s.failFirst && n == 1 {
		return nil, errors.New("connection reset")
	}
	return &store.WorkflowRecord{Namespace: namespace, Name: name, Version: version, Definition: s.def}, nil
}

// TestDefinitionReadOnce: callers that want a version not decoded yet
// while one reads it wait for that read instead of reading it again; if
// the read fails, its caller gets the error and one of the others reads.
func TestDefinitionReadOnce(t *testing.T) {
	t.Parallel()
	w := &workflow.Workflow{Namespace: "shop", Name: "orders", Version: "1",
		Steps: []workflow.Step{{Name: "charge", Handler: "charge"}}}
	def, err := json.Marshal(w)
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		failFirst bool
		reads     int32
		errs      int
	}{
		{"read succeeds", false, 1, 0},
		{"first read fails", true, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &readCountingStore{def: def, release: make(chan struct{}), failFirst: tc.failFirst}
			d := &Definitions{e: &Engine{store: s}, workflows: map[string]*workflow.Workflow{}, reading: map[string]chan struct{}{}}
			const callers = 50
			got := make([]*workflow.Workflow, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { got[i], errs[i] = d.get(context.Background(), "shop", "orders", "1") })
			}
			close(s.release)
			wg.Wait()
			require.Equal(t, tc.reads, s.reads.Load())
			var failed int
			var first *workflow.Workflow
			for i := range callers {
				if errs[i] != nil {
					failed++
					continue
				}
				if first == nil {
					first = got[i]
				}
				require.Same(t, first, got[i], "every caller gets the one decoded version")
			}
			require.Equal(t, tc.errs, failed)
			require.Equal(t, "shop/orders@1", first.Ref())
		})
	}
}
