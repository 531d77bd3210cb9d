import { packageJson } from "../../package-files.js";
import { apiRoute, Reply } from "../route.js";
import { healthSchema, readinessSchema } from "../schemas.js";

const VERSION = packageJson().version;

/** Liveness and readiness, public so that load balancers and orchestrators can probe them. */
export const healthRoutes = [
  apiRoute({
    method: "GET",
    path: "/api/health",
    role: "public",
    operationId: "health",
    summary: "Liveness: the process answers",
    tag: "health",
    success: { status: 200, description: "The coordinator process is up.", schema: healthSchema },
    handle: async ({ coordinator }) => {
      const cluster = coordinator.membershipView();
      return {
        status: "ok",
        version: VERSION,
        uptimeS: Math.round(coordinator.uptimeMs() / 1000),
        ...(cluster === undefined ? {} : { cluster }),
      };
    },
  }),
  apiRoute({
    method: "GET",
    path: "/api/ready",
    role: "public",
    operationId: "ready",
    summary:
      "Readiness: the store answers, the MQTT link is up, and this coordinator is the active one",
    description: "200 when ready; 503 with the same body when not.",
    tag: "health",
    success: { status: 200, description: "Ready (503 when not).", schema: readinessSchema },
    otherResponses: [{ status: 503, description: "Not ready.", schema: readinessSchema }],
    handle: async ({ coordinator }) => {
      const r = await coordinator.readiness();
      return r.ready ? r : new Reply(503, r);
    },
  }),
];
