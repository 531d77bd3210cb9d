import { AxError } from "../../../shared/errors.js";
import type { Coordinator } from "../../coordinator.js";
import type { AgentRecord } from "../../store/port.js";
import { apiRoute } from "../route.js";
import {
  agentListSchema,
  agentSchema,
  commandBody,
  commandResultSchema,
  eventBody,
  eventParams,
  eventResultSchema,
  idParams,
} from "../schemas.js";

function agentView(coordinator: Coordinator, a: AgentRecord, inFlight: Record<string, number>) {
  return {
    ...a,
    live: coordinator.registry.isLive(a.agentId, Date.now()),
    inFlight: inFlight[a.agentId] ?? 0,
  };
}

/** The fleet, device commands and events. */
export const fleetRoutes = [
  apiRoute({
    method: "GET",
    path: "/api/agents",
    role: "viewer",
    operationId: "listAgents",
    summary: "List the agents the coordinator knows",
    tag: "fleet",
    success: { status: 200, description: "Every known agent, by id.", schema: agentListSchema },
    handle: async ({ coordinator }) => {
      const inFlight = await coordinator.store.countInFlightByAgent();
      const agents = coordinator.registry
        .list()
        .sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
      return { items: agents.map((a) => agentView(coordinator, a, inFlight)) };
    },
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
    handle: async ({ coordinator, params }) => {
      const agent = coordinator.registry.get(params.id);
      if (!agent) {
        throw new AxError("AX_AGENT_NOT_FOUND", `agent "${params.id}" not found`, {
          context: { agentId: params.id },
        });
      }
      return agentView(coordinator, agent, await coordinator.store.countInFlightByAgent());
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/commands",
    role: "operator",
    operationId: "sendCommand",
    summary: "Send a device command",
    description:
      "To one agent (agentId) or to every known agent matching a tag selector that offers the " +
      "handler (none: 404 AX_AGENT_NOT_FOUND). A command for an agentId not known yet is created " +
      "anyway: it waits PENDING for the agent and is EXPIRED at its deadline if it never comes.",
    tag: "fleet",
    body: commandBody,
    success: {
      status: 202,
      description: "One execution per target agent.",
      schema: commandResultSchema,
    },
    errors: [404],
    handle: async ({ coordinator, body, principal }) => {
      const now = Date.now();
      const at = body.at ?? now;
      const deadline = body.deadline ?? at + 30_000;
      if (deadline < now) {
        throw new AxError("AX_API_INVALID_REQUEST", "the command's deadline has passed", {
          context: {
            issues: [
              {
                path: ["body", body.deadline === undefined ? "at" : "deadline"],
                message: `is in the past (${new Date(deadline).toISOString()}); it could only expire`,
              },
            ],
          },
        });
      }
      const common = {
        handler: body.handler,
        params: body.params,
        at,
        deadline,
        priority: body.priority,
        ...(body.timeout === undefined ? {} : { timeoutMs: body.timeout }),
      };
      const targets = await coordinator.sendCommands(
        body.selector === undefined
          ? { ...common, agentId: body.agentId as string }
          : { ...common, selector: body.selector.tags },
        principal.name,
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
      fired: await coordinator.fireEvent(params.name, body.payload),
    }),
  }),
];
