import { afterAll, beforeAll, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { type ClusterRig, clusterRig } from "../helpers/cluster.js";
import { waitFor } from "../helpers/env.js";
import { call } from "../helpers/http.js";
import { describeOnPg } from "../helpers/postgres.js";

/**
 * Two coordinators on one PostgreSQL store, one secrets folder, each serving the API: a token or
 * an enrolment made through one holds on the other at once, and so does its revocation (before,
 * a standby knew no API token at all, and a revocation made on one held on the other until it
 * restarted).
 */
await describeOnPg("who may act, shared by the coordinators of one store", (url) => {
  let rig: ClusterRig;
  let admin: string;
  let active: Coordinator;
  let a: string;
  let b: string;

  beforeAll(async () => {
    rig = await clusterRig(url);
    const first = await rig.serve("coord-a");
    active = first.c;
    a = first.url;
    b = (await rig.serve("coord-b")).url;
    admin = rig.adminToken();
  }, 30_000);

  afterAll(() => rig?.close());

  it("knows on each coordinator the tokens made and revoked through the other", async () => {
    expect((await call(b, "GET", "/api/ready")).status).toBe(503); // b stands by
    const made = await call<{ token: string }>(a, "POST", "/api/tokens", {
      token: admin,
      body: { name: "dash", role: "viewer" },
    });
    expect(made.status).toBe(201);
    const dash = made.body.token;
    expect((await call(a, "GET", "/api/jobs", { token: dash })).status).toBe(200);
    await waitFor("the standby to take the new token", async () =>
      (await call(b, "GET", "/api/jobs", { token: dash })).status === 200 ? true : undefined,
    );
    const listed = await call<{ items: { name: string }[] }>(b, "GET", "/api/tokens", {
      token: admin,
    });
    expect(listed.body.items.map((t) => t.name)).toEqual(["dash"]);

    // Made on the standby, revoked on the active one: refused on both.
    const other = await call<{ token: string }>(b, "POST", "/api/tokens", {
      token: admin,
      body: { name: "ops", role: "operator" },
    });
    expect(other.status).toBe(201);
    await waitFor("the active one to take the standby's token", async () =>
      (await call(a, "GET", "/api/jobs", { token: other.body.token })).status === 200
        ? true
        : undefined,
    );
    expect((await call(a, "DELETE", "/api/tokens/ops", { token: admin })).status).toBe(204);
    await waitFor("the standby to refuse the revoked token", async () =>
      (await call(b, "GET", "/api/jobs", { token: other.body.token })).status === 401
        ? true
        : undefined,
    );
    expect((await call(a, "GET", "/api/jobs", { token: other.body.token })).status).toBe(401);
  });

  it("knows on each coordinator the agents enrolled and revoked through the other", async () => {
    const enrolled = await call(b, "POST", "/api/identities", {
      token: admin,
      body: { agentId: "dev-1", tags: { site: "north" } },
    });
    expect(enrolled.status).toBe(201);
    // The active one authenticates the agents' messages: it must know the key at once.
    await waitFor("the active one to know the agent enrolled on the standby", () =>
      active.identities.keyOf("dev-1") !== undefined ? true : undefined,
    );
    expect((await call(b, "POST", "/api/identities/dev-1/revoke", { token: admin })).status).toBe(
      200,
    );
    await waitFor("the active one to refuse the revoked agent", () =>
      active.identities.keyOf("dev-1") === undefined ? true : undefined,
    );
    expect(active.identities.get("dev-1")?.status).toBe("revoked");
  });
});
