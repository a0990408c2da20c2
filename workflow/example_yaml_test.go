package workflow_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftrun/weft/workflow"
)

// Load reads a template file: one workflow version, with the same steps
// and options as the Go builder.
func ExampleLoad() {
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "checkout.yaml")
	err := os.WriteFile(path, []byte(`namespace: shop
name: checkout
version: 1.0.0
steps:
  - name: validate
    handler: exec
    config: { command: ["./validate.sh"] }
  - name: charge
    handler: shop.charge
    depends_on: [validate]
    retry: { max_attempts: 5, backoff: exponential, initial: 1s, max: 1m }
    timeout: 30s
`), 0o600)
	if err != nil {
		fmt.Println(err)
		return
	}

	wf, err := workflow.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(wf.Ref())
	for _, s := range wf.Steps {
		fmt.Printf("%s: handler %s, config %s, attempts %d, timeout %s\n",
			s.Name, s.Handler, s.Config, s.Retry.MaxAttempts, time.Duration(s.Timeout))
	}
	// Output:
	// shop/checkout@1.0.0
	// validate: handler exec, config {"command":["./validate.sh"]}, attempts 0, timeout 0s
	// charge: handler shop.charge, config , attempts 5, timeout 30s
}

// Every problem of a template is reported at once, each with its file and
// line: YAML errors, unknown keys and values, and what Validate finds.
func ExampleLoad_errors() {
	dir, _ := os.MkdirTemp("", "weft-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "release.yaml")
	err := os.WriteFile(path, []byte(`namespace: deploy
name: release
version: "2"
steps:
  - name: push
    handler: deploy.push
    timeout: 30
  - name: rollback
    handler: deploy.rollback
    depends_on: [push]
    trigger_rule: on_failure
  - name: report
    type: converge
    handler: deploy.report
    depends_on: [push, rollbak]
`), 0o600)
	if err != nil {
		fmt.Println(err)
		return
	}

	_, err = workflow.Load(path)
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Println(strings.TrimPrefix(line, dir+string(filepath.Separator)))
	}
	// Output:
	// release.yaml:7: step "push": timeout: invalid duration "30" (use Go syntax such as 10ms, 30s, 1m, or days such as 7d)
	// release.yaml:11: step "rollback": trigger_rule: "on_failure" is not one of [all_success all_done one_success one_failed all_failed none_failed none_failed_min_one_success always]
	// release.yaml:12: step "report": depends_on: depends on unknown step "rollbak"
}

// Templates describe dynamic workflows too: a decision, a batch whose items
// run a step template, a durable wait for a signal, and conditions.
func ExampleParse_dynamic() {
	wf, err := workflow.Parse("order.yaml", []byte(`namespace: shop
name: order
version: "3"
identity: strict
templates:
  - name: pack_item
    handler: shop.pack
    retry: { max_attempts: 2 }
steps:
  - name: assess
    handler: shop.assess
    type: decision
  - name: review
    type: signal
    signal: { name: approval, timeout: 24h }
    depends_on: [assess]
  - name: auto
    handler: shop.approve
    depends_on: [assess]
  - name: pack
    handler: shop.list_items
    type: batch
    worker: pack_item
    depends_on: [review, auto]
    trigger_rule: none_failed_min_one_success
    when: 'has(input.items) && size(input.items) > 0'
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(wf.Ref(), wf.Identity)
	for _, s := range wf.Steps {
		fmt.Printf("%s type=%q rule=%q", s.Name, s.Type, s.Rule())
		switch s.Type {
		case workflow.StepSignal:
			fmt.Printf(" waits for %q up to %s", s.SignalName(), time.Duration(s.Signal.Timeout))
		case workflow.StepBatch:
			fmt.Printf(" items run %s (%s)", s.Worker, wf.StepTemplate(s.Worker).Handler)
		}
		fmt.Println()
	}
	// Output:
	// shop/order@3 strict
	// assess type="decision" rule=""
	// review type="signal" rule="" waits for "approval" up to 24h0m0s
	// auto type="" rule=""
	// pack type="batch" rule="none_failed_min_one_success" items run pack_item (shop.pack)
}
