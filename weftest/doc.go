// Package weftest helps test workflows and the Go handlers they run, in the
// spirit of River's rivertest.
//
// New gives each test its own engine on a fresh SQLite file in
// t.TempDir(), with short poll and heartbeat intervals and a quiet logger,
// started at once and stopped and closed when the test ends. Register the
// handlers and workflows under test on it, run a task to its end, and check
// what happened:
//
//	func TestCheckout(t *testing.T) {
//		h := weftest.New(t)
//		h.Handle("shop.charge", charge)
//		wf := h.Register(workflow.New("shop", "checkout", "1").Step("charge", "shop.charge"))
//
//		res := h.RunWorkflow(ctx, wf, map[string]int{"cents": 600})
//
//		res.RequireCompleted(t)
//		res.RequireStep(t, "charge").Completed().Attempts(1).ResultJSON(`{"ok": true}`)
//	}
//
// Every helper that can go wrong fails the test with t.Fatalf and a message
// that says what was expected, what was found and, for a task, the state,
// attempts, result and error of each of its steps; there are no errors to
// check. Run fails the test when the task does not end within the harness's
// timeout (WithTimeout, default DefaultTimeout), showing where it stands.
//
// The assertions are methods of the Result that Run, Wait and Inspect
// return, each taking the test's t: Result.RequireState and
// Result.RequireCompleted check the task, Result.RequireStep returns a
// StepAssert whose methods (State, Completed, Failed, Skipped, Attempts,
// ErrorContains, ResultJSON, DecodeResult, CheckpointJSON, Transition)
// each check one thing and return the StepAssert, so checks chain. Once a
// check of a chain fails, the later ones are skipped. Inspect builds a
// Result from any engine, so the assertions work without a Harness too.
//
// weftest takes a TestingT, the few methods of testing.TB it uses, rather
// than a *testing.T, so that its own tests can hand it a fake and check
// that its assertions fail, and say why, when they should.
package weftest
