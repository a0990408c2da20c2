package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

func (s *Server) createWebhook(r *http.Request) (int, any, error) {
	var req wire.CreateWebhook
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if req.URL == "" {
		return 0, nil, fieldError("url", "is required: where the events are POSTed")
	}
	// A webhook follows only namespaces its creator may read: one bound
	// to some names one of them.
	if sc := requestScope(r); !sc.All {
		ns := webhookNamespace(req.Namespace, req.Workflow)
		if ns == "" {
			return 0, nil, fieldError("namespace", "is required: this credential reads only in %s", sc)
		}
		if err := checkScope(r.Context(), "namespace", ns); err != nil {
			return 0, nil, err
		}
	}
	w, err := s.engine.CreateWebhook(r.Context(), weft.WebhookSpec{URL: req.URL, Namespace: req.Namespace, Workflow: req.Workflow, Types: req.Types},
		weft.Operator{Actor: operator(r.Context())})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, wire.WebhookOf(w), nil
}

func (s *Server) listWebhooks(r *http.Request) (int, any, error) {
	ws, err := s.engine.Webhooks(r.Context())
	if err != nil {
		return 0, nil, err
	}
	ws = visible(r, ws, func(w weft.Webhook) string { return webhookNamespace(w.Namespace, w.Workflow) })
	if ws == nil {
		ws = []weft.Webhook{}
	}
	return http.StatusOK, wire.WebhookList{Webhooks: wire.List(ws, wire.WebhookOf)}, nil
}

func (s *Server) deleteWebhook(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	if err := s.engine.DeleteWebhook(r.Context(), id, weft.Operator{Actor: operator(r.Context())}); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func (s *Server) enableWebhook(r *http.Request) (int, any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return 0, nil, err
	}
	if err := s.engine.EnableWebhook(r.Context(), id, weft.Operator{Actor: operator(r.Context())}); err != nil {
		return 0, nil, err
	}
	ws, err := s.engine.Webhooks(r.Context())
	if err != nil {
		return 0, nil, err
	}
	for _, w := range ws {
		if w.ID == id {
			return http.StatusOK, wire.WebhookOf(w), nil
		}
	}
	return 0, nil, fmt.Errorf("webhook %d: %w", id, store.ErrNotFound)
}

// webhookNamespace is the namespace a webhook follows: its namespace
// filter, else its workflow filter's; "" for every namespace.
func webhookNamespace(namespace, workflow string) string {
	if namespace != "" {
		return namespace
	}
	ns, _, found := strings.Cut(workflow, "/")
	if !found {
		return ""
	}
	return ns
}
