import { AxError, isAxError } from "../../../shared/errors.js";
import type { Coordinator } from "../../coordinator.js";
import { jobDefinitionSchema } from "../../domain/job.js";
import { preview } from "../../domain/schedule.js";
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

/** A stored job as the API shows it. */
export function jobView(job: StoredJob) {
  return {
    id: job.id,
    version: job.version,
    definition: job.definition,
    nextFireAt: job.nextFireAt,
    paused: job.definition.paused,
    createdAt: job.createdAt,
    updatedAt: job.updatedAt,
    updatedBy: job.updatedBy,
  };
}

/**
 * Stores a definition; a definition the coordinator refuses (a job firing after itself) is
 * AX_JOB_INVALID with its issues' paths under `body`.
 */
async function put(coordinator: Coordinator, input: unknown, actor: string): Promise<StoredJob> {
  try {
    return await coordinator.putJob(input, actor);
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

function notFound(id: string): AxError {
  return new AxError("AX_JOB_NOT_FOUND", `job "${id}" not found`, { context: { jobId: id } });
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
      const page = await coordinator.store.pageJobs({
        limit: query.limit,
        ...(query.cursor === undefined ? {} : { cursor: query.cursor }),
      });
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
    handle: async ({ coordinator, body, principal }) => {
      if (await coordinator.store.getJob(body.id)) {
        throw new AxError(
          "AX_JOB_EXISTS",
          `job "${body.id}" already exists; update it instead (PUT /api/jobs/${body.id}, ax job edit)`,
          {
            context: { jobId: body.id },
          },
        );
      }
      return jobView(await put(coordinator, body, principal.name));
    },
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
    handle: async ({ coordinator, params }) => {
      const job = await coordinator.store.getJob(params.id);
      if (!job) throw notFound(params.id);
      return jobView(job);
    },
  }),
  apiRoute({
    method: "PUT",
    path: "/api/jobs/{id}",
    role: "operator",
    operationId: "updateJob",
    summary: "Update a job (a new version)",
    description:
      "Replaces the definition; a changed one becomes a new version, an identical one changes nothing. " +
      "Executions keep the version they fired under.",
    tag: "jobs",
    params: idParams,
    body: jobUpdateBody,
    success: { status: 200, description: "The job as stored now.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params, body, principal }) => {
      if (body.id !== undefined && body.id !== params.id) {
        throw new AxError("AX_API_INVALID_REQUEST", "the body's id is not the job in the path", {
          context: {
            issues: [{ path: ["body", "id"], message: `must be "${params.id}" (the path's id)` }],
          },
        });
      }
      if (!(await coordinator.store.getJob(params.id))) throw notFound(params.id);
      return jobView(await put(coordinator, { ...body, id: params.id }, principal.name));
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
      await coordinator.deleteJob(params.id, principal.name);
      return undefined;
    },
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/pause",
    role: "operator",
    operationId: "pauseJob",
    summary: "Pause a job",
    tag: "jobs",
    params: idParams,
    success: { status: 200, description: "The job, paused.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) =>
      jobView(await coordinator.pauseJob(params.id, principal.name)),
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/resume",
    role: "operator",
    operationId: "resumeJob",
    summary: "Resume a job",
    description: "Fire times missed while paused follow the job's misfire policy.",
    tag: "jobs",
    params: idParams,
    success: { status: 200, description: "The job, resumed.", schema: jobSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) =>
      jobView(await coordinator.resumeJob(params.id, principal.name)),
  }),
  apiRoute({
    method: "POST",
    path: "/api/jobs/{id}/trigger",
    role: "operator",
    operationId: "triggerJob",
    summary: "Fire a job now",
    description: "Outside its trigger, with all its rules; one execution per shard.",
    tag: "jobs",
    params: idParams,
    success: { status: 202, description: "The executions created.", schema: executionIdsSchema },
    errors: [404],
    handle: async ({ coordinator, params, principal }) => ({
      executionIds: await coordinator.triggerJobAll(params.id, principal.name),
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
      const job = await coordinator.store.getJob(params.id);
      if (!job) throw notFound(params.id);
      return { times: preview(job.definition.trigger, query.after ?? Date.now(), query.n) };
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
    handle: async ({ body }) => ({
      times: preview(body.trigger, body.after ?? Date.now(), body.n),
    }),
  }),
];
