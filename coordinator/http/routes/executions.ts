import { bodilessIdempotency, IDEMPOTENCY_HEADER } from "../../operations/idempotency.js";
import { apiRoute } from "../route.js";
import {
  executionDetailSchema,
  executionPageSchema,
  executionSchema,
  executionsQuery,
  idParams,
  retrySchema,
} from "../schemas.js";

export const executionRoutes = [
  apiRoute({
    method: "GET",
    path: "/api/executions",
    role: "viewer",
    operationId: "listExecutions",
    summary: "List executions, newest first",
    description:
      "Filters combine (all must match). Paged by cursor: pass a page's nextCursor as cursor for " +
      "the next; pages neither repeat nor skip an execution while new ones are created.",
    tag: "executions",
    query: executionsQuery,
    success: { status: 200, description: "One page.", schema: executionPageSchema },
    handle: async ({ coordinator, query }) =>
      coordinator.executions.list({
        limit: query.limit,
        ...(query.job === undefined ? {} : { jobId: query.job }),
        ...(query.state === undefined ? {} : { states: query.state }),
        ...(query.agent === undefined ? {} : { agentId: query.agent }),
        ...(query.kind === undefined ? {} : { kind: query.kind }),
        ...(query.from === undefined ? {} : { createdFrom: query.from }),
        ...(query.to === undefined ? {} : { createdBefore: query.to }),
        ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/executions/{id}",
    role: "viewer",
    operationId: "getExecution",
    summary: "Show an execution and its timeline",
    tag: "executions",
    params: idParams,
    success: { status: 200, description: "The execution.", schema: executionDetailSchema },
    errors: [404],
    handle: async ({ coordinator, params }) => coordinator.executions.detail(params.id),
  }),
  apiRoute({
    method: "POST",
    path: "/api/executions/{id}/cancel",
    role: "operator",
    operationId: "cancelExecution",
    summary: "Cancel an execution",
    description:
      "One not yet dispatched ends CANCELED at once; one an agent holds is sent a cancel and ends " +
      "when the agent answers. One that already ended: 409 AX_EXEC_CONFLICT.",
    tag: "executions",
    params: idParams,
    success: { status: 202, description: "The execution as it is now.", schema: executionSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, principal }) =>
      coordinator.executions.cancel(params.id, principal.name),
  }),
  apiRoute({
    method: "POST",
    path: "/api/executions/{id}/retry",
    role: "operator",
    operationId: "retryExecution",
    headers: [IDEMPOTENCY_HEADER],
    summary: "Retry an execution as a new one",
    description:
      "Only a FAILED, TIMED_OUT, EXPIRED or CANCELED execution (else 409 AX_EXEC_CONFLICT).",
    tag: "executions",
    params: idParams,
    success: { status: 201, description: "The new execution's id.", schema: retrySchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, principal, headers }) => ({
      executionId: await coordinator.executions.retry(
        params.id,
        principal.name,
        bodilessIdempotency(headers, principal.name, `POST /api/executions/${params.id}/retry`),
      ),
      retryOf: params.id,
    }),
  }),
];
