import { z } from "zod";

/**
 * A field that is missing reads `mqtt: is required (object)`, as the agent's and the protocol's
 * errors do, instead of zod's `Invalid input: expected object, received undefined`. Every other
 * message stays zod's English one; a parse's own error map still comes first. Imported for its
 * effect by the modules whose schemas read what operators write (config, jobs, rollouts, bundle
 * manifests, API requests).
 */
z.config({
  customError: (issue) =>
    issue.code === "invalid_type" && issue.input === undefined
      ? `is required (${issue.expected})`
      : undefined,
});
