package weftv1

import (
	"net/http"

	"connectrpc.com/connect"
)

// httpStatuses are the HTTP statuses of the REST answers that the gRPC
// codes the API answers stand for.
var httpStatuses = map[connect.Code]int{
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeUnauthenticated:    http.StatusUnauthorized,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodeFailedPrecondition: http.StatusConflict,
	connect.CodeAborted:            http.StatusConflict,
	connect.CodeResourceExhausted:  http.StatusServiceUnavailable,
	connect.CodeUnavailable:        http.StatusServiceUnavailable,
	connect.CodeDeadlineExceeded:   http.StatusServiceUnavailable,
}

// HTTPStatus is the HTTP status of the REST answer that a gRPC code of
// the API stands for; false for a code the API does not answer with.
func HTTPStatus(code connect.Code) (int, bool) {
	s, ok := httpStatuses[code]
	return s, ok
}
