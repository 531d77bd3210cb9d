import { apiRoute } from "../route.js";
import {
  idParams,
  rolloutActionBody,
  rolloutBody,
  rolloutDetailSchema,
  rolloutListSchema,
  rolloutSchema,
  rolloutsQuery,
} from "../schemas.js";

/** Rollouts: one device command to a selection of the fleet, paced, in waves, with abort criteria. */
export const rolloutRoutes = [
  apiRoute({
    method: "POST",
    path: "/api/rollouts",
    role: "operator",
    operationId: "createRollout",
    summary: "Create a rollout",
    description:
      "One device command for every agent the selector matches (now or while the rollout is " +
      "open) that offers the handler, reached at the rate, wave by wave, and aborted when the " +
      "abort criteria are met (docs/rollouts.md). It starts at once unless start is false " +
      "(CREATED, started by resume). An id that is taken: 409 AX_ROLLOUT_CONFLICT.",
    tag: "rollouts",
    body: rolloutBody,
    success: { status: 201, description: "The rollout.", schema: rolloutSchema },
    errors: [409],
    handle: async ({ coordinator, body, principal }) =>
      coordinator.rollouts.create(body, principal.name),
  }),
  apiRoute({
    method: "GET",
    path: "/api/rollouts",
    role: "viewer",
    operationId: "listRollouts",
    summary: "List rollouts",
    description: "Newest first, optionally in one state, in pages (nextCursor).",
    tag: "rollouts",
    query: rolloutsQuery,
    success: { status: 200, description: "A page of rollouts.", schema: rolloutListSchema },
    errors: [400],
    handle: async ({ coordinator, query }) =>
      coordinator.rollouts.list({
        limit: query.limit,
        ...(query.state === undefined ? {} : { state: query.state }),
        ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/rollouts/{id}",
    role: "viewer",
    operationId: "getRollout",
    summary: "Show a rollout, its progress and its timeline",
    tag: "rollouts",
    params: idParams,
    success: {
      status: 200,
      description: "The rollout and its timeline.",
      schema: rolloutDetailSchema,
    },
    errors: [404],
    handle: async ({ coordinator, params }) => coordinator.rollouts.detail(params.id),
  }),
  apiRoute({
    method: "POST",
    path: "/api/rollouts/{id}/pause",
    role: "operator",
    operationId: "pauseRollout",
    summary: "Pause a rollout",
    description:
      "No more agents are reached until it is resumed; executions already sent run on, and the " +
      "abort criteria still apply to them. From IN_PROGRESS or CREATED.",
    tag: "rollouts",
    params: idParams,
    body: rolloutActionBody,
    bodyOptional: true,
    success: { status: 200, description: "The rollout.", schema: rolloutSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, body, principal }) =>
      coordinator.rollouts.pause(params.id, body.reason, principal.name),
  }),
  apiRoute({
    method: "POST",
    path: "/api/rollouts/{id}/resume",
    role: "operator",
    operationId: "resumeRollout",
    summary: "Resume (or start) a rollout",
    description: "From PAUSED, or CREATED (its start).",
    tag: "rollouts",
    params: idParams,
    body: rolloutActionBody,
    bodyOptional: true,
    success: { status: 200, description: "The rollout.", schema: rolloutSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, principal }) =>
      coordinator.rollouts.resume(params.id, principal.name),
  }),
  apiRoute({
    method: "POST",
    path: "/api/rollouts/{id}/abort",
    role: "operator",
    operationId: "abortRollout",
    summary: "Abort a rollout",
    description:
      "ABORTED: no more agents are reached, and every execution it left open is canceled. From " +
      "any state but ABORTED and COMPLETED.",
    tag: "rollouts",
    params: idParams,
    body: rolloutActionBody,
    bodyOptional: true,
    success: { status: 200, description: "The rollout.", schema: rolloutSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, body, principal }) =>
      coordinator.rollouts.abort(params.id, body.reason, principal.name),
  }),
];
