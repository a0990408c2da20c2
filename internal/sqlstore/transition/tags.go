package transition

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqltx"
)

// This file holds task tags: the JSON copy on the task row that reads
// return, and the task_tags rows that filters look up by index.

// encodeTags returns the tags column of a task: a JSON object, or NULL for
// none.
func encodeTags(tags map[string]string) any {
	if len(tags) == 0 {
		return nil
	}
	b, _ := json.Marshal(tags) // a map of strings always encodes
	return string(b)
}

// insertTags writes a new task's tags into task_tags, in one statement.
func (t *submitTx) insertTags(taskID int64, tags map[string]string) error {
	if len(tags) == 0 {
		return nil
	}
	keys := sqltx.SortedKeys(tags)
	args := make([]any, 0, 3*len(keys))
	for _, k := range keys {
		args = append(args, taskID, k, tags[k])
	}
	q := `INSERT INTO task_tags (task_id, key, value) VALUES ` + strings.Repeat("(?, ?, ?), ", len(keys)-1) + `(?, ?, ?)`
	if _, err := t.Exec(q, args...); err != nil {
		return fmt.Errorf("tags of task %d: %w", taskID, err)
	}
	return nil
}
