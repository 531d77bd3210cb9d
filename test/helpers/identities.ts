import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { type CoordinatorConfigInput, parseCoordinatorConfig } from "../../coordinator/config.js";
import { openStore, secretsDir } from "../../coordinator/coordinator.js";
import { Identities } from "../../coordinator/security/identities.js";
import { loadOrCreateSecrets } from "../../coordinator/security/secrets.js";

/**
 * Enrols `agentIds` in the store of a coordinator that is not running yet (a child process about
 * to start on that store), as `ax fleet enroll` would, and writes each identity file (0600) into
 * `dir`. Returns the files by agent id.
 */
export async function enrollBeforeStart(
  input: CoordinatorConfigInput,
  agentIds: readonly string[],
  dir: string,
  tags: Record<string, string> = {},
): Promise<Record<string, string>> {
  const config = parseCoordinatorConfig(input);
  const store = await openStore(config);
  try {
    const identities = new Identities(store, loadOrCreateSecrets(secretsDir(config)), Date.now);
    await identities.load();
    const files: Record<string, string> = {};
    for (const agentId of agentIds) {
      const { file } = await identities.enroll(agentId, { tags, actor: "test" });
      const path = join(dir, `${agentId}.identity.json`);
      writeFileSync(path, JSON.stringify(file), { mode: 0o600 });
      files[agentId] = path;
    }
    return files;
  } finally {
    await store.close();
  }
}
