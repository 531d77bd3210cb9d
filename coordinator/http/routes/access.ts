import { z } from "zod";
import { ID_PATTERN } from "../../../shared/ids.js";
import { API_ROLES, TOKEN_NAME_PATTERN } from "../../config.js";
import { idSchema, tagsSchema } from "../../domain/job.js";
import { apiRoute } from "../route.js";
import {
  identitySchema,
  jobHistoryEntrySchema,
  pageCursor,
  pageLimit,
  tokenViewSchema,
} from "../schemas.js";

/*
 * The admin routes: API tokens and agent enrolment. What they return is a credential (a token, an
 * identity file) or says who holds one, so only an admin token may call them.
 */

const tokenNameSchema = z
  .string()
  .regex(TOKEN_NAME_PATTERN, "must be 1 to 64 letters, digits, '.', '_' or '-'");

const tokenBody = z
  .object({
    name: tokenNameSchema.meta({ description: "Recorded as the actor of what the token does." }),
    role: z.enum(API_ROLES, { message: 'must be "viewer", "operator" or "admin"' }),
  })
  .strict();

const createdToken = z.object({
  token: z.string().meta({ description: "The token: shown this once, kept only as a digest." }),
  ...tokenViewSchema.shape,
});

const tokenParams = z.object({ name: tokenNameSchema });

const enrolBody = z
  .object({
    agentId: z.string().regex(ID_PATTERN, "must be 1-128 of A-Z a-z 0-9 . _ : - (no / + # $)"),
    tags: tagsSchema.optional(),
    rotate: z.boolean().optional(),
  })
  .strict();

const agentParams = z.object({ agentId: idSchema });

/** API tokens, agent enrolment, and who changed a job. */
export const accessRoutes = [
  apiRoute({
    method: "POST",
    path: "/api/tokens",
    role: "admin",
    operationId: "createToken",
    summary: "Make an API token",
    description:
      "Returns the token once; the coordinator keeps only its SHA-256 digest. A name that is " +
      "taken (admin, a config token, another API token): 409 AX_API_TOKEN_EXISTS.",
    tag: "access",
    body: tokenBody,
    success: { status: 201, description: "The token and its record.", schema: createdToken },
    errors: [409],
    handle: async ({ coordinator, body, principal }) =>
      coordinator.access.createToken(body.name, body.role, principal.name),
  }),
  apiRoute({
    method: "GET",
    path: "/api/tokens",
    role: "admin",
    operationId: "listTokens",
    summary: "List the tokens made through the API",
    description: "Names, roles and times; never a token or its digest.",
    tag: "access",
    success: {
      status: 200,
      description: "By name.",
      schema: z.object({ items: z.array(tokenViewSchema) }),
    },
    handle: async ({ coordinator }) => ({ items: coordinator.access.listTokens() }),
  }),
  apiRoute({
    method: "DELETE",
    path: "/api/tokens/{name}",
    role: "admin",
    operationId: "revokeToken",
    summary: "Revoke an API token",
    description: "Refused from the next request on. Unknown: 404 AX_API_TOKEN_NOT_FOUND.",
    tag: "access",
    params: tokenParams,
    success: { status: 204, description: "Revoked." },
    errors: [404],
    handle: async ({ coordinator, params }) => {
      await coordinator.access.revokeToken(params.name);
      return undefined;
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/identities",
    role: "admin",
    operationId: "enrollAgent",
    summary: "Enrol an agent",
    description:
      "Returns the identity file the device needs (a secret: its key and broker password). " +
      "Already enrolled without rotate: 409 AX_AGENT_ENROLLED; rotate gives a new key " +
      "generation, and the old key stops working at once.",
    tag: "access",
    body: enrolBody,
    success: {
      status: 201,
      description: "The enrolment and the device's identity file.",
      schema: z.object({
        identity: identitySchema,
        file: z.record(z.string(), z.unknown()).meta({ description: "agent-identity/1" }),
      }),
    },
    errors: [409],
    handle: async ({ coordinator, body, principal }) =>
      coordinator.access.enrol(body.agentId, {
        ...(body.tags === undefined ? {} : { tags: body.tags }),
        ...(body.rotate === undefined ? {} : { rotate: body.rotate }),
        actor: principal.name,
      }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/identities",
    role: "admin",
    operationId: "listIdentities",
    summary: "List enrolled and revoked agents",
    description: "Never a key: those derive from the fleet key and are only in identity files.",
    tag: "access",
    success: {
      status: 200,
      description: "By agent id.",
      schema: z.object({ items: z.array(identitySchema) }),
    },
    handle: async ({ coordinator }) => ({ items: coordinator.access.listIdentities() }),
  }),
  apiRoute({
    method: "POST",
    path: "/api/identities/{agentId}/revoke",
    role: "admin",
    operationId: "revokeAgent",
    summary: "Revoke an agent's enrolment",
    description: "Its messages and broker login are refused from now on. Unknown: 404.",
    tag: "access",
    params: agentParams,
    success: { status: 200, description: "The enrolment, revoked.", schema: identitySchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) =>
      coordinator.access.revokeAgent(params.agentId, principal.name),
  }),
  apiRoute({
    method: "GET",
    path: "/api/jobs/{id}/history",
    role: "viewer",
    operationId: "jobHistory",
    summary: "Who changed a job, or fired it by hand",
    description:
      "Kept after the job is deleted. A page at a time from the newest back: each page the newest `limit` entries before the cursor, oldest first; `nextCursor` reads the page before it (null on the page of the first entry).",
    tag: "jobs",
    params: z.object({ id: idSchema }),
    query: z.object({ limit: pageLimit("Entries", 1000, 100), cursor: pageCursor() }).strict(),
    success: {
      status: 200,
      description: "The job's history, a page of it.",
      schema: z.object({
        items: z.array(jobHistoryEntrySchema),
        nextCursor: z.string().nullable(),
      }),
    },
    handle: async ({ coordinator, params, query }) =>
      coordinator.jobs.history(params.id, { limit: query.limit, cursor: query.cursor }),
  }),
];
