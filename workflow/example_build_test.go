package workflow_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/weftrun/weft/workflow"
)

// New starts a definition; Step adds steps with options for their
// dependencies, configuration, retry policy, timeout and type.
func ExampleNew() {
	wf := workflow.New("shop", "checkout", "1.0.0").
		Step("validate", "exec", workflow.WithConfig(map[string]any{"command": []string{"./validate.sh"}})).
		Step("charge", "shop.charge",
			workflow.DependsOn("validate"),
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 5, Backoff: "exponential", Initial: workflow.Duration(time.Second)}),
			workflow.WithTimeout(30*time.Second)).
		Step("ship", "shop.ship", workflow.DependsOn("charge"), workflow.WithPriority(10))
	if err := wf.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(wf.Ref())
	for _, s := range wf.Steps {
		fmt.Printf("%s runs %s after %v\n", s.Name, s.Handler, s.DependsOn)
	}
	fmt.Println("children of validate:", wf.Children("validate"))
	// Output:
	// shop/checkout@1.0.0
	// validate runs exec after []
	// charge runs shop.charge after [validate]
	// ship runs shop.ship after [charge]
	// children of validate: [charge]
}

// Validate reports every problem of a definition at once, each naming its
// step and key; definitions built in Go have no file and line.
func ExampleWorkflow_Validate() {
	wf := workflow.New("shop", "checkout", "1").
		Step("charge", "shop.charge", workflow.DependsOn("ship")).
		Step("ship", "shop.ship", workflow.DependsOn("charge")).
		Step("notify", "", workflow.DependsOn("invoice")).
		Step("split", "shop.split", workflow.AsBatch("item")).
		Step("audit", "shop.audit", workflow.WithRetry(workflow.RetryPolicy{Backoff: "random"}))
	for _, line := range strings.Split(wf.Validate().Error(), "\n") {
		fmt.Println(line)
	}
	// Output:
	// step "notify": handler: is required
	// step "split": worker: no template named "item"
	// step "audit": retry: backoff "random" is not one of exponential, fixed, linear
	// step "charge": depends_on: cycle: charge -> ship -> charge
	// step "notify": depends_on: depends on unknown step "invoice"
}

// A step's trigger rule decides from how its dependencies ended whether it
// runs; a converge step has none_failed_min_one_success, every other step
// all_success unless it says otherwise.
func ExampleWithTriggerRule() {
	wf := workflow.New("deploy", "release", "1").
		Step("push", "deploy.push").
		Step("canary", "deploy.canary").
		Step("announce", "deploy.announce", workflow.DependsOn("push", "canary")).
		Step("rollback", "deploy.rollback", workflow.DependsOn("push", "canary"), workflow.WithTriggerRule(workflow.OneFailed)).
		Step("unlock", "deploy.unlock", workflow.DependsOn("push", "canary"), workflow.WithTriggerRule(workflow.AllDone)).
		Step("report", "deploy.report", workflow.DependsOn("announce", "rollback"), workflow.AsConverge())
	if err := wf.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range wf.Steps[2:] {
		rule := s.Rule()
		if rule == "" {
			rule = workflow.AllSuccess
		}
		fmt.Println(s.Name, rule)
	}
	// Output:
	// announce all_success
	// rollback one_failed
	// unlock all_done
	// report none_failed_min_one_success
}

// ParseRef splits a workflow reference; the version is optional.
func ExampleParseRef() {
	for _, ref := range []string{"shop/checkout@1.0.0", "shop/checkout", "checkout"} {
		ns, name, version, err := workflow.ParseRef(ref)
		fmt.Printf("%q %q %q %v\n", ns, name, version, err)
	}
	// Output:
	// "shop" "checkout" "1.0.0" <nil>
	// "shop" "checkout" "" <nil>
	// "" "" "" invalid workflow: "checkout": want namespace/name or namespace/name@version
}
