import { z } from "zod";
import { agentUpdatePageSchema, UPDATE_HISTORY_SCAN } from "../../operations/agent-update.js";
import { IDEMPOTENCY_HEADER, idempotencyOf } from "../../operations/idempotency.js";
import { apiRoute } from "../route.js";
import {
  agentListSchema,
  agentSchema,
  agentsQuery,
  commandBody,
  commandResultSchema,
  eventBody,
  eventParams,
  eventResultSchema,
  idParams,
  pageCursor,
  pageLimit,
} from "../schemas.js";

/** Paging of an agent's update history. */
const agentUpdatesQuery = z
  .object({
    limit: pageLimit("Updates", 100, 20),
    cursor: pageCursor(),
  })
  .strict();

/** The fleet, device commands and events. */
export const fleetRoutes = [
  apiRoute({
    method: "GET",
    path: "/api/agents",
    role: "viewer",
    operationId: "listAgents",
    summary: "List the agents the coordinator knows",
    tag: "fleet",
    description:
      "The agents the coordinator knows, online or not, by id, filtered by status, tags, profile, " +
      "bundle version, handler and a part of the id, in pages of up to 1,000 (nextCursor), with " +
      "how many match on all pages and how many of those are online.",
    query: agentsQuery,
    success: {
      status: 200,
      description: "A page of the known agents, by id.",
      schema: agentListSchema,
    },
    errors: [400],
    handle: async ({ coordinator, query }) => coordinator.agents.page(query),
  }),
  apiRoute({
    method: "GET",
    path: "/api/agents/{id}",
    role: "viewer",
    operationId: "getAgent",
    summary: "Show an agent",
    tag: "fleet",
    params: idParams,
    success: { status: 200, description: "The agent.", schema: agentSchema },
    errors: [404],
    handle: async ({ coordinator, params }) => coordinator.agents.get(params.id),
  }),
  apiRoute({
    method: "GET",
    path: "/api/agents/{id}/updates",
    role: "viewer",
    operationId: "listAgentUpdates",
    summary: "List an agent's updates",
    tag: "fleet",
    description:
      "The agent's agent.update executions, newest first: when, from which bundle version to " +
      `which, their state and message. A page looks through the agent's newest ${UPDATE_HISTORY_SCAN} ` +
      "device commands at most; nextCursor goes on from there.",
    params: idParams,
    query: agentUpdatesQuery,
    success: {
      status: 200,
      description: "A page of the agent's updates, newest first.",
      schema: agentUpdatePageSchema,
    },
    errors: [400, 404],
    handle: async ({ coordinator, params, query }) => coordinator.agents.updates(params.id, query),
  }),
  apiRoute({
    method: "POST",
    path: "/api/commands",
    role: "operator",
    operationId: "sendCommand",
    summary: "Send a device command",
    description:
      "To one agent (agentId) or to every known agent matching a tag selector that offers the " +
      "handler. An agentId the coordinator does not know (neither enrolled nor ever connected): " +
      "404 AX_AGENT_NOT_FOUND, unless queue is true, when the command waits PENDING for that agent " +
      "and is EXPIRED at its deadline if it never comes. An agent, or every agent the selector " +
      "matches, without the handler: 409 AX_AGENT_NO_HANDLER. A refused command creates nothing.",
    tag: "fleet",
    headers: [IDEMPOTENCY_HEADER],
    body: commandBody,
    success: {
      status: 202,
      description: "One execution per target agent.",
      schema: commandResultSchema,
    },
    errors: [404, 409],
    handle: async ({ coordinator, body, principal, headers }) => {
      const key = idempotencyOf(
        headers["idempotency-key"],
        principal.name,
        "POST /api/commands",
        body,
      );
      const common = {
        handler: body.handler,
        params: body.params,
        priority: body.priority,
        ...(body.at === undefined ? {} : { at: body.at }),
        ...(body.deadline === undefined ? {} : { deadline: body.deadline }),
        ...(body.timeout === undefined ? {} : { timeoutMs: body.timeout }),
      };
      const targets = await coordinator.commands.send(
        body.selector === undefined
          ? { ...common, agentId: body.agentId as string, queue: body.queue }
          : { ...common, selector: body.selector.tags },
        principal.name,
        key,
      );
      return { executionIds: targets.map((t) => t.executionId), targets };
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/events/{name}",
    role: "operator",
    operationId: "fireEvent",
    summary: "Fire an event",
    description:
      "As a message on ax/v1/events/{name} would: every unpaused job listening for it fires, with " +
      "payload merged into its params. The body may be left out.",
    tag: "fleet",
    params: eventParams,
    body: eventBody,
    bodyOptional: true,
    success: { status: 202, description: "How many jobs fired.", schema: eventResultSchema },
    handle: async ({ coordinator, params, body }) => ({
      event: params.name,
      fired: await coordinator.jobs.fireEvent(params.name, body.payload),
    }),
  }),
];
