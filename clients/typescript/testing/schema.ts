// Checks what the client sends and what the server answers against
// server/openapi.json, as the tests run: a fetch that validates each JSON
// request and response body against the schema of its operation and status,
// and records every disagreement. A small validator of the keywords the
// document uses (type, nullable, enum, required, properties,
// additionalProperties, items, allOf, $ref, bounds, date-time).

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { REPO } from "./weftserver.js";

type Schema = {
  $ref?: string;
  type?: string;
  nullable?: boolean;
  enum?: unknown[];
  required?: string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  items?: Schema;
  allOf?: Schema[];
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  maxItems?: number;
  format?: string;
};
type Content = { content?: Record<string, { schema?: Schema }>; $ref?: string };
type Operation = { requestBody?: Content; responses: Record<string, Content> };

const doc = JSON.parse(readFileSync(join(REPO, "server", "openapi.json"), "utf8")) as {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; responses: Record<string, Content> };
};

function resolveRef<T>(ref: string): T {
  const parts = ref.replace(/^#\//, "").split("/");
  let node: unknown = doc;
  for (const p of parts) node = (node as Record<string, unknown>)[p];
  if (node === undefined) throw new Error(`openapi.json: unresolved $ref ${ref}`);
  return node as T;
}

/** The problems of value against schema, each as "path: problem". */
export function check(schema: Schema, value: unknown, path = "$"): string[] {
  if (schema.$ref) return check(resolveRef<Schema>(schema.$ref), value, path);
  const out: string[] = [];
  for (const part of schema.allOf ?? []) out.push(...check(part, value, path));
  if (value === null) return schema.nullable || schema.type === undefined ? out : [...out, `${path}: null, want ${schema.type}`];
  if (schema.enum && !schema.enum.includes(value)) out.push(`${path}: ${JSON.stringify(value)} is not one of ${schema.enum.join(", ")}`);
  const kind = Array.isArray(value) ? "array" : Number.isInteger(value) ? "integer" : typeof value;
  if (schema.type && schema.type !== kind && !(schema.type === "number" && kind === "integer")) {
    return [...out, `${path}: ${kind}, want ${schema.type}`];
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${path}: ${value} < minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.push(`${path}: ${value} > maximum ${schema.maximum}`);
  }
  if (typeof value === "string") {
    if (schema.maxLength !== undefined && value.length > schema.maxLength) out.push(`${path}: longer than ${schema.maxLength}`);
    if (schema.format === "date-time" && Number.isNaN(Date.parse(value))) out.push(`${path}: ${JSON.stringify(value)} is not a date-time`);
  }
  if (Array.isArray(value)) {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push(`${path}: more than ${schema.maxItems} items`);
    if (schema.items) value.forEach((v, i) => out.push(...check(schema.items as Schema, v, `${path}[${i}]`)));
  } else if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    for (const name of schema.required ?? []) if (!(name in obj)) out.push(`${path}: required ${name} is missing`);
    for (const [name, v] of Object.entries(obj)) {
      const prop = schema.properties?.[name];
      if (prop) out.push(...check(prop, v, `${path}.${name}`));
      else if (schema.additionalProperties === false) out.push(`${path}: ${name} is not in the schema`);
      else if (typeof schema.additionalProperties === "object") out.push(...check(schema.additionalProperties, v, `${path}.${name}`));
    }
  }
  return out;
}

/** The operation of method and path (literal paths before templated ones). */
function operation(method: string, pathname: string): [string, Operation] | undefined {
  const candidates = Object.entries(doc.paths)
    .filter(([template]) => new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(pathname))
    .sort(([a], [b]) => (a.match(/\{/g)?.length ?? 0) - (b.match(/\{/g)?.length ?? 0));
  for (const [template, ops] of candidates) {
    const op = ops[method.toLowerCase()];
    if (op) return [`${method} ${template}`, op];
  }
  return undefined;
}

function jsonSchema(content: Content | undefined): Schema | undefined {
  const c = content?.$ref ? resolveRef<Content>(content.$ref) : content;
  return c?.content?.["application/json"]?.schema;
}

/** A fetch that records each disagreement of a request or response with the document in problems. */
export function checkingFetch(problems: string[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? "GET";
    const found = operation(method, url.pathname);
    if (found === undefined) {
      problems.push(`${method} ${url.pathname}: no such operation in openapi.json`);
      return fetch(input, init);
    }
    const [name, op] = found;
    if (typeof init?.body === "string") {
      const schema = jsonSchema(op.requestBody);
      if (schema === undefined) problems.push(`${name}: a body is sent, the document describes none`);
      else for (const p of check(schema, JSON.parse(init.body), "request")) problems.push(`${name}: ${p}`);
    }
    const resp = await fetch(input, init);
    const described = op.responses[String(resp.status)];
    if (described === undefined) {
      problems.push(`${name}: status ${resp.status} is not in the document (${[...Object.keys(op.responses)].join(", ")})`);
      return resp;
    }
    if (resp.headers.get("Content-Type")?.startsWith("application/json")) {
      const text = await resp.clone().text();
      const schema = jsonSchema(described);
      if (schema === undefined && text) problems.push(`${name} ${resp.status}: a JSON body the document does not describe`);
      if (schema !== undefined && text) for (const p of check(schema, JSON.parse(text), "response")) problems.push(`${name} ${resp.status}: ${p}`);
    }
    return resp;
  };
}

/** The problems of value against a named schema of the document's components. */
export function checkSchema(name: string, value: unknown): string[] {
  return check({ $ref: `#/components/schemas/${name}` }, value);
}
