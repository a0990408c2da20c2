package store

import (
	"context"
	"time"

	"github.com/weftrun/weft/state"
)

// Stats are the aggregate reads behind the dashboard's overview: bounded
// counts and activity over a recent window, each answered from an index.
type Stats interface {
	// CountTasksByState counts the tasks in each state, stopping at limit
	// per state so that the cost stays bounded however many tasks there
	// are (a count equal to limit means "at least limit"). namespaces, if
	// not nil, counts those namespaces' tasks alone.
	CountTasksByState(ctx context.Context, limit int, namespaces []string) ([]StateCount, error)
	// TaskActivity groups the tasks that finished at or after q.Since by
	// namespace and by bucket of q.Bucket, reading at most q.MaxTasks of the
	// most recently finished ones (Truncated then reports that older ones
	// in the window were left out).
	TaskActivity(ctx context.Context, q ActivityQuery) (Activity, error)
	// CountHeld counts the running steps each engine or remote worker
	// holds, by holder id.
	CountHeld(ctx context.Context) (map[string]int, error)
}

// StateCount is how many tasks are in one state (at most the limit asked).
type StateCount struct {
	State state.Task
	Count int
}

// ActivityQuery selects the window of TaskActivity.
type ActivityQuery struct {
	Since  time.Time
	Bucket time.Duration
	// MaxTasks bounds the tasks read; 0 means 100,000.
	MaxTasks int
	// Namespaces, if not nil, reads those namespaces' tasks alone.
	Namespaces []string
}

// Activity is what finished in a window, by namespace and bucket.
type Activity struct {
	Buckets []ActivityBucket
	// Truncated: more tasks finished in the window than MaxTasks; the
	// buckets cover the most recent ones only.
	Truncated bool
}

// ActivityBucket counts the tasks of one namespace that finished in one
// bucket [Start, Start+Bucket).
type ActivityBucket struct {
	Namespace string
	Start     time.Time
	Finished  int
	// Failed counts the finished tasks that failed or expired.
	Failed int
	// Waited counts the finished tasks that started, and WaitTotal sums
	// how long each waited from its run_at until it started.
	Waited    int
	WaitTotal time.Duration
}
