package server

import (
	"errors"
	"net/http"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

func toWorkflowJSON(w store.WorkflowRecord) wire.Workflow {
	out := wire.Workflow{Namespace: w.Namespace, Name: w.Name, Version: w.Version, Ref: w.Namespace + "/" + w.Name + "@" + w.Version,
		Definition: w.Definition}
	if !w.CreatedAt.IsZero() {
		out.CreatedAt = w.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	return out
}

// parseTemplate decodes a template request; problems come back as a list.
func parseTemplate(r *http.Request) (*workflow.Workflow, []wire.Problem, error) {
	var req wire.TemplateRequest
	if err := decode(r, &req); err != nil {
		return nil, nil, err
	}
	if req.Template == "" {
		return nil, nil, fieldError("template", "is required: the YAML text of a workflow template")
	}
	name := req.Filename
	if name == "" {
		name = "template.yaml"
	}
	w, err := workflow.Parse(name, []byte(req.Template))
	if err != nil {
		return nil, problems(err), nil
	}
	return w, nil, nil
}

func problems(err error) []wire.Problem {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]wire.Problem, 0, len(errs))
	for _, e := range errs {
		var de *workflow.DefinitionError
		if errors.As(e, &de) {
			out = append(out, wire.Problem{Line: de.Line, Step: de.Step, Field: de.Field, Message: de.Msg})
		} else {
			out = append(out, wire.Problem{Message: e.Error()})
		}
	}
	return out
}

func (s *Server) registerWorkflow(r *http.Request) (int, any, error) {
	w, probs, err := parseTemplate(r)
	if err != nil {
		return 0, nil, err
	}
	if probs != nil {
		return 0, nil, &apiError{Status: http.StatusBadRequest, Code: CodeInvalidWorkflow, Field: "template",
			Message: "the template is not valid: " + probs[0].Message, Problems: probs}
	}
	if err := checkScope(r.Context(), "template", w.Namespace); err != nil {
		return 0, nil, err
	}
	// Registering the same definition again changes nothing and answers
	// 200; a different definition under the version is refused.
	rec, created, err := s.engine.RegisterVersion(r.Context(), w)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return status, toWorkflowJSON(rec), nil
}

func (s *Server) validateWorkflow(r *http.Request) (int, any, error) {
	w, probs, err := parseTemplate(r)
	if err != nil {
		return 0, nil, err
	}
	if probs != nil {
		requestScope(r) // a template that does not parse names no namespace
		return http.StatusOK, wire.Validation{Valid: false, Problems: probs}, nil
	}
	if err := checkScope(r.Context(), "template", w.Namespace); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.Validation{Valid: true, Workflow: w.Ref(), Steps: len(w.Steps)}, nil
}

func (s *Server) listWorkflows(r *http.Request) (int, any, error) {
	ws, err := s.engine.Workflows(r.Context())
	if err != nil {
		return 0, nil, err
	}
	ws = visible(r, ws, func(w store.WorkflowRecord) string { return w.Namespace })
	out := wire.WorkflowList{Workflows: make([]wire.Workflow, len(ws))}
	for i, w := range ws {
		out.Workflows[i] = toWorkflowJSON(w)
	}
	return http.StatusOK, out, nil
}

func (s *Server) getWorkflow(r *http.Request) (int, any, error) {
	version := r.PathValue("version")
	if version == "latest" {
		version = ""
	}
	rec, err := s.engine.Registered(r.Context(), r.PathValue("namespace"), r.PathValue("name"), version)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, toWorkflowJSON(*rec), nil
}
