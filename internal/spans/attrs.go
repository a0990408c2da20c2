package spans

import "go.opentelemetry.io/otel/attribute"

// Span attribute keys of weft's spans: the messaging conventions' where
// they fit, weft's own otherwise.
const (
	AttrSystem      = attribute.Key("messaging.system")
	AttrOpName      = attribute.Key("messaging.operation.name")
	AttrOpType      = attribute.Key("messaging.operation.type")
	AttrDestination = attribute.Key("messaging.destination.name")
	AttrMessageID   = attribute.Key("messaging.message.id")
	AttrBatchCount  = attribute.Key("messaging.batch.message_count")
	AttrTaskID      = attribute.Key("weft.task.id")
	AttrWorkflow    = attribute.Key("weft.workflow")
	AttrStep        = attribute.Key("weft.step")
	AttrStepKind    = attribute.Key("weft.step.kind")
	AttrHandler     = attribute.Key("weft.handler")
	AttrAttempt     = attribute.Key("weft.attempt")
	AttrAttempts    = attribute.Key("weft.attempts")
	AttrState       = attribute.Key("weft.state")
	AttrReason      = attribute.Key("weft.reason")
	AttrOutcome     = attribute.Key("weft.outcome")
	AttrQueueWait   = attribute.Key("weft.queue_wait_ms")
	AttrRemote      = attribute.Key("weft.worker.id")
	AttrDuplicate   = attribute.Key("weft.duplicate")
	AttrErrorType   = attribute.Key("error.type")
)

// SystemWeft is messaging.system of weft's spans.
var SystemWeft = AttrSystem.String("weft")
