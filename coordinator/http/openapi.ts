import { z } from "zod";
import type { AnyRoute } from "./route.js";
import { errorSchema } from "./schemas.js";

type JsonSchema = Record<string, unknown>;

/**
 * A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect), in its input form: what a client
 * sends, and for responses a superset of what it receives (stored job definitions are in their
 * resolved form, which parses again to itself).
 */
function jsonSchema(schema: z.ZodType): JsonSchema {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, {
    io: "input",
    unrepresentable: "any",
  }) as JsonSchema;
  return rest;
}

const STATUS_TEXT: Record<number, string> = {
  400: "The request is invalid; every issue is listed with its path (AX_API_INVALID_REQUEST).",
  401: "No bearer token, or an unknown one (AX_API_UNAUTHORIZED).",
  403: "The token's role does not allow this (AX_API_FORBIDDEN), or the Origin is refused (AX_API_ORIGIN_REFUSED).",
  404: "Not found.",
  409: "Conflicts with the resource's state.",
  413: "The body is over the size limit (AX_API_TOO_LARGE).",
  415: "The body is not sent as the route's Content-Type (AX_API_UNSUPPORTED_MEDIA_TYPE).",
  416: "The Range starts at or past the end (AX_API_RANGE_NOT_SATISFIABLE).",
  503: "Not available now.",
};

/** The path and query parameters of a zod object schema, one OpenAPI parameter per field. */
function parameters(where: "path" | "query", schema: z.ZodType | undefined): JsonSchema[] {
  if (!schema) return [];
  const shape = (schema as unknown as { shape?: Record<string, z.ZodType> }).shape ?? {};
  return Object.entries(shape).map(([name, field]) => {
    const s = jsonSchema(field);
    const { description, ...rest } = s;
    return {
      name,
      in: where,
      required: where === "path" || !field.safeParse(undefined).success,
      ...(description === undefined ? {} : { description }),
      schema: rest,
    };
  });
}

/**
 * The OpenAPI 3.1 document of `routes`, generated from the zod schemas the server validates
 * requests with, so the two cannot disagree.
 */
export function openApiDocument(routes: readonly AnyRoute[], version: string): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  const error = { $ref: "#/components/schemas/Error" };
  const errorResponse = (status: number) => ({
    description: STATUS_TEXT[status] ?? "An error.",
    content: { "application/json": { schema: error } },
  });
  for (const route of routes) {
    const responses: Record<string, JsonSchema> = {};
    const op: JsonSchema = {
      operationId: route.operationId,
      summary: route.summary,
      tags: [route.tag],
      "x-ax-role": route.role,
      security: route.role === "public" ? [] : [{ bearer: [] }],
    };
    if (route.kind === "raw") {
      const pathParams = [...route.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
        name: m[1],
        in: "path",
        required: true,
        schema: { type: "string" },
      }));
      if (pathParams.length > 0) op.parameters = pathParams;
      if (route.description) op.description = route.description;
      if (route.body) {
        const binary = { schema: { type: "string", contentMediaType: route.body.contentTypes[0] } };
        op.requestBody = {
          required: true,
          description: route.body.description,
          content: Object.fromEntries(route.body.contentTypes.map((t) => [t, binary])),
        };
        responses["413"] = errorResponse(413);
        responses["415"] = errorResponse(415);
      }
      responses[String(route.success?.status ?? 200)] = {
        description: route.success?.description ?? route.summary,
        content: { [route.contentType]: { schema: { type: "string" } } },
      };
      for (const also of route.alsoSuccess ?? []) {
        responses[String(also.status)] = {
          description: also.description,
          content: { [route.contentType]: { schema: { type: "string" } } },
        };
      }
      for (const s of route.errors ?? []) responses[String(s)] = errorResponse(s);
      if (route.noQuery) responses["400"] ??= errorResponse(400);
    } else {
      if (route.description) op.description = route.description;
      const params = [
        ...parameters("path", route.params),
        ...parameters("query", route.query),
        ...(route.headers ?? []).map((h) => ({
          name: h.name,
          in: "header",
          required: false,
          description: h.description,
          schema: h.schema,
        })),
      ];
      if (params.length > 0) op.parameters = params;
      if (route.body) {
        op.requestBody = {
          required: route.bodyOptional !== true,
          content: { "application/json": { schema: jsonSchema(route.body) } },
        };
      }
      const { status, description, schema } = route.success;
      responses[String(status)] = schema
        ? { description, content: { "application/json": { schema: jsonSchema(schema) } } }
        : { description };
      for (const other of route.otherResponses ?? []) {
        responses[String(other.status)] = {
          description: other.description,
          content: { "application/json": { schema: jsonSchema(other.schema) } },
        };
      }
      if (route.params || route.query || route.body) responses["400"] = errorResponse(400);
      if (route.body) {
        responses["413"] = errorResponse(413);
        responses["415"] = errorResponse(415);
      }
      for (const s of route.errors ?? []) responses[String(s)] = errorResponse(s);
    }
    if (route.role !== "public") {
      responses["401"] = errorResponse(401);
      if (route.role !== "viewer") responses["403"] = errorResponse(403);
    }
    op.responses = responses;
    paths[route.path] ??= {};
    (paths[route.path] as Record<string, JsonSchema>)[route.method.toLowerCase()] = op;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "ax coordinator API",
      version,
      description:
        "Jobs, executions, the fleet, device commands and events. Times are UTC milliseconds. " +
        "Errors are { error: { code, message, issues? } } with a stable code (docs/errors.md). " +
        "Every request's Host must be one of the coordinator's names (else 421), and a request " +
        "from a web page of another origin is refused (403).",
    },
    paths,
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description:
            "The admin token (ax-secrets/admin.token), a token made with POST /api/tokens, or one " +
            "of the config's http.auth.tokens; role viewer, operator or admin (x-ax-role). Only " +
            "in the Authorization header: a token in the query string is refused.",
        },
      },
      schemas: { Error: jsonSchema(errorSchema) },
    },
  };
}
