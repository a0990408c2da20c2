package transition

import (
	"fmt"

	"github.com/weftrun/weft/internal/sqlstore/claim"
	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/store"
)

// This file holds the writes of scheduling policies: their version, which
// claims read them again by, and their change log.

// MovePolicyVersion moves the policy version: every claim after this
// transaction commits reads the policies again.
func (t *operatorTx) MovePolicyVersion() error {
	if _, err := t.Exec(`UPDATE policy_version SET version = version + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("move the policy version: %w", err)
	}
	return nil
}

// ReadPolicies reads policies rows with a WHERE clause.
func (t *operatorTx) ReadPolicies(where string, args ...any) ([]store.Policy, error) {
	rows, err := t.Query(`SELECT `+claim.PolicyColumns+` FROM policies `+where+` ORDER BY target`, args...)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	pols, err := sqldb.Collect(rows, claim.ScanPolicy)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	return pols, nil
}

// RecordPolicyChange writes one entry of the policy audit.
func (t *operatorTx) RecordPolicyChange(at int64, actor, target, change, reason string) error {
	if _, err := t.Exec(`INSERT INTO policy_changes (at, actor, target, change, reason) VALUES (?, ?, ?, ?, ?)`,
		at, actor, target, change, reason); err != nil {
		return fmt.Errorf("audit policy change of %s: %w", target, err)
	}
	return nil
}
