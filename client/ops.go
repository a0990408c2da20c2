package client

import (
	"context"
	"net/url"
	"sort"
	"strconv"

	"github.com/weftrun/weft/wire"
)

// This file holds the operator calls on many tasks (bulk cancel, retry,
// delete, prune), retention and the list of engines and workers.

func sortedTagKeys(tags map[string]string) []string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CancelTasks cancels the pending and running tasks req.Filter selects
// (req.DryRun: counts them).
func (c *Client) CancelTasks(ctx context.Context, req wire.BulkRequest) (wire.BulkResult, error) {
	return c.bulk(ctx, "cancel", req)
}

// RetryTasks retries the failed tasks req.Filter selects.
func (c *Client) RetryTasks(ctx context.Context, req wire.BulkRequest) (wire.BulkResult, error) {
	return c.bulk(ctx, "retry", req)
}

// DeleteTasks deletes the finished tasks req.Filter selects (req.Force:
// cancels unfinished ones first).
func (c *Client) DeleteTasks(ctx context.Context, req wire.BulkRequest) (wire.BulkResult, error) {
	return c.bulk(ctx, "delete", req)
}

func (c *Client) bulk(ctx context.Context, action string, req wire.BulkRequest) (wire.BulkResult, error) {
	var out wire.BulkResult
	_, err := c.do(ctx, "POST", "/v1/tasks/"+action, req, &out)
	return out, err
}

// Prune deletes the tasks in a final state that finished more than
// req.OlderThan ago.
func (c *Client) Prune(ctx context.Context, req wire.PruneRequest) (wire.BulkResult, error) {
	var out wire.BulkResult
	_, err := c.do(ctx, "POST", "/v1/tasks/prune", req, &out)
	return out, err
}

// SetRetention sets or clears (an empty duration) the retention of a
// namespace's finished tasks by state, and returns every retention set.
func (c *Client) SetRetention(ctx context.Context, namespace string, keep map[string]string) (wire.RetentionList, error) {
	var out wire.RetentionList
	_, err := c.do(ctx, "PUT", "/v1/retention/"+url.PathEscape(namespace), wire.Retention{Keep: keep}, &out)
	return out, err
}

// Retentions lists the namespace retentions.
func (c *Client) Retentions(ctx context.Context) (wire.RetentionList, error) {
	var out wire.RetentionList
	_, err := c.do(ctx, "GET", "/v1/retention", nil, &out)
	return out, err
}

// Workers lists the live engines and remote workers.
func (c *Client) Workers(ctx context.Context) ([]wire.Worker, error) {
	var out wire.WorkerList
	if _, err := c.do(ctx, "GET", "/v1/workers", nil, &out); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

// OperatorLog returns the newest entries of the operator log (deletions of
// tasks, changes of retention), at most limit (0: 100).
func (c *Client) OperatorLog(ctx context.Context, limit int) ([]wire.OperatorEntry, error) {
	path := "/v1/oplog"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out wire.OperatorLog
	if _, err := c.do(ctx, "GET", path, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}
