import { AxError, isAxError } from "../../../shared/errors.js";
import { jobDefinitionSchema, type Trigger } from "../../domain/job.js";
import { bodilessIdempotency, IDEMPOTENCY_HEADER } from "../../operations/idempotency.js";
import type { StoredJob } from "../../store/port.js";
import { apiRoute } from "../route.js";
import {
  executionIdsSchema,
  idParams,
  jobListSchema,
  jobPreviewQuery,
  jobSchema,
  jobsQuery,
  jobUpdateBody,
  previewBody,
  previewSchema,
} from "../schemas.js";

/**
 * A stored job as the API shows it. A paused job shows no next fire time (issue 17): it has none
 * until it is resumed, when its misfire policy decides. Its definition's `paused` is its state.
 */
export function jobView(job: StoredJob) {
  return {
    id: job.id,
    version: job.version,
    definition: { ...job.definition, paused: job.paused },
    nextFireAt: job.paused ? null : job.nextFireAt,
    paused: job.paused,
    createdAt: job.createdAt,
    updatedAt: job.updatedAt,
    updatedBy: job.updatedBy,
  };
}

/** A preview's answer: the fire times, and the zone a cron trigger reckons them in. */
function withZone(trigger: Trigger, times: number[]): { times: number[]; tz?: string } {
  return trigger.type === "cron" ? { times, tz: trigger.tz } : { times };
}

/**
 * Runs a job write; a definition the coordinator refuses (a job firing after itself) is
 * AX_JOB_INVALID with its issues' paths under `body`.
 */
async function inBody(write: Promise<StoredJob>): Promise<StoredJob> {
  try {
    return await write;
  } catch (err) {
    const issues = isAxError(err, "AX_JOB_INVALID") ? err.context.issues : undefined;
    if (!Array.isArray(issues)) throw err;
    throw new AxError("AX_JOB_INVALID", (err as AxError).message, {
      cause: err,
      context: {
        issues: (issues as { path: string[]; message: string }[]).map((i) => ({
          path: ["body", ...i.path],
          message: i.message,
        })),
      },
    });
  }
}

export const jobRoutes = [
  apiRoute({
    method: "GET",
    path: "/api/jobs",
    role: "viewer",
    operationId: "listJobs",
    summary: "List jobs, by id",
    description:
      "Paged: pass a page's nextCursor as cursor for the next; jobs added or deleted between " +
      "pages neither repeat nor shift the others.",
    tag: "jobs",
    query: jobsQuery,
    success: { status: 200, description: "One page, by id.", schema: jobListSchema },
    handle: async ({ coordinator, query }) => {
      const page = await coordinator.jobs.list(query);
      return { items: page.items.map(jobView), nextCursor: page.nextCursor };
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs",
    role: "operator",
    operationId: "createJob",
    summary: "Create a job",
    description: "Stores version 1 of a new job. A job with the id already: 409 AX_JOB_EXISTS.",
    tag: "jobs",
    body: jobDefinitionSchema,
    success: { status: 201, description: "The job as stored.", schema: jobSchema },
    errors: [409],
    handle: async ({ coordinator, body, principal }) =>
      jobView(await inBody(coordinator.jobs.create(body, principal.name))),
  }),
  apiRoute({
    method: "GET",
    path: "/api/jobs/{id}",
    role: "viewer",
    operationId: "getJob",
    summary: "Show a job",
    tag: "jobs",
    params: idParams,
    success: { status: 200, description: "The job.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params }) => jobView(await coordinator.jobs.get(params.id)),
  }),
  apiRoute({
    method: "PUT",
    path: "/api/jobs/{id}",
    role: "operator",
    operationId: "updateJob",
    summary: "Update a job (a new version)",
    description:
      "Replaces the definition; a changed one becomes a new version, an identical one changes nothing. " +
      "Executions keep the version they fired under. With `If-Match: N` (the `version` read), " +
      "the job must still be at version N, else 409 AX_STORE_CONFLICT and nothing is written.",
    tag: "jobs",
    params: idParams,
    body: jobUpdateBody,
    success: { status: 200, description: "The job as stored now.", schema: jobSchema },
    errors: [404, 409],
    handle: async ({ coordinator, params, body, principal, headers }) => {
      const ifVersion = ifMatchVersion(headers["if-match"]);
      if (body.id !== undefined && body.id !== params.id) {
        throw new AxError("AX_API_INVALID_REQUEST", "the body's id is not the job in the path", {
          context: {
            issues: [{ path: ["body", "id"], message: `must be "${params.id}" (the path's id)` }],
          },
        });
      }
      return jobView(
        await inBody(coordinator.jobs.update(params.id, body, principal.name, ifVersion)),
      );
    },
  }),
  apiRoute({
    method: "DELETE",
    path: "/api/jobs/{id}",
    role: "operator",
    operationId: "deleteJob",
    summary: "Delete a job",
    description:
      "It fires no more. Its executions stay, open ones included (cancel them to stop them).",
    tag: "jobs",
    params: idParams,
    success: { status: 204, description: "Deleted." },
    errors: [404],
    handle: async ({ coordinator, params, principal }) => {
      await coordinator.jobs.delete(params.id, principal.name);
      return undefined;
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/pause",
    role: "operator",
    operationId: "pauseJob",
    summary: "Pause a job",
    description:
      "It fires nothing until resumed. Its state changes, not its definition: the version stays, " +
      "the history records who paused it, and the job shows no next fire time while paused.",
    tag: "jobs",
    params: idParams,
    success: { status: 200, description: "The job, paused.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) =>
      jobView(await coordinator.jobs.pause(params.id, principal.name)),
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/resume",
    role: "operator",
    operationId: "resumeJob",
    summary: "Resume a job",
    description:
      "The version stays. Fire times missed while paused follow the job's misfire policy, applied " +
      "at once: the job returned shows its next fire time after now.",
    tag: "jobs",
    params: idParams,
    success: { status: 200, description: "The job, resumed.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) =>
      jobView(await coordinator.jobs.resume(params.id, principal.name)),
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/trigger",
    role: "operator",
    operationId: "triggerJob",
    headers: [IDEMPOTENCY_HEADER],
    summary: "Fire a job now",
    description: "Outside its trigger, with all its rules; one execution per shard.",
    tag: "jobs",
    params: idParams,
    success: { status: 202, description: "The executions created.", schema: executionIdsSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal, headers }) => ({
      executionIds: await coordinator.jobs.trigger(
        params.id,
        principal.name,
        bodilessIdempotency(headers, principal.name, `POST /api/jobs/${params.id}/trigger`),
      ),
    }),
  }),
  apiRoute({
    method: "GET",
    path: "/api/jobs/{id}/preview",
    role: "viewer",
    operationId: "previewJob",
    summary: "The job's next fire times",
    description: "Event, after and manual triggers have none.",
    tag: "jobs",
    params: idParams,
    query: jobPreviewQuery,
    success: { status: 200, description: "The next n nominal fire times.", schema: previewSchema },
    errors: [404],
    handle: async ({ coordinator, params, query }) => {
      const { trigger } = (await coordinator.jobs.get(params.id)).definition;
      return withZone(trigger, coordinator.jobs.previewTrigger(trigger, query));
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/preview",
    role: "viewer",
    operationId: "previewTrigger",
    summary: "A trigger's next fire times (cron preview)",
    description: "Changes nothing; for trying out a trigger before storing it.",
    tag: "jobs",
    body: previewBody,
    success: { status: 200, description: "The next n nominal fire times.", schema: previewSchema },
    handle: async ({ coordinator, body }) =>
      withZone(body.trigger, coordinator.jobs.previewTrigger(body.trigger, body)),
  }),
];

/**
 * The version an `If-Match` header names: `3` or `"3"` (an entity tag of the job's version).
 * Undefined without the header; AX_API_INVALID_REQUEST naming the header for anything else.
 */
export function ifMatchVersion(header: string | string[] | undefined): number | undefined {
  if (header === undefined) return undefined;
  const text = (Array.isArray(header) ? header.join(",") : header).trim();
  const m = /^(?:"([1-9][0-9]{0,15})"|([1-9][0-9]{0,15}))$/.exec(text);
  const version = m === null ? Number.NaN : Number(m[1] ?? m[2]);
  if (!Number.isSafeInteger(version)) {
    throw new AxError(
      "AX_API_INVALID_REQUEST",
      `If-Match: must be the job's version, such as "3"`,
      {
        context: {
          issues: [
            { path: ["headers", "if-match"], message: 'must be a job version, such as "3"' },
          ],
        },
      },
    );
  }
  return version;
}
