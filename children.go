package weft

import (
	"context"
	"encoding/json"
	"time"
)

// StartChild starts a child task of the workflow ref ("namespace/name" or
// "namespace/name@version") with input, from the running step. name
// identifies the child among those the step starts: a step that runs again
// (after a crash or a retry) and starts a child of the same name gets the
// existing task instead of a second one. The child links to this task and
// step (Task.ParentTaskID, ParentStep; this task's Children lists it), is
// cancelled with this task, and counts against the workflow's limits
// (MaxDepth, MaxChildren). The step does not wait for it unless the handler
// calls WaitChild.
func (a *Attempt) StartChild(ctx context.Context, name, ref string, input any) (int64, error) {
	return a.run.StartChild(ctx, name, ref, input)
}

// WaitChild waits for a child task to end, with the handler's slot released
// while it waits (as DeferUntil), checking every interval (0: a second). A
// completed child returns its result: the results of its final steps by
// step name. Any other end is an error, which fails the attempt under the
// step's retry policy.
func (a *Attempt) WaitChild(ctx context.Context, id int64, interval time.Duration) (json.RawMessage, error) {
	return a.run.WaitChild(ctx, id, interval)
}
