import { PgStore } from "../../coordinator/store/postgres/pg-store.js";
import { describeOnPg, dropPgSchema, freshPgSchema } from "../helpers/postgres.js";
import { storeContract } from "./store.contract.js";
import { storeClusterContract } from "./store-cluster.contract.js";

await describeOnPg("postgres store", (url) => {
  // Each test its own schema on the test server; openAnother is a second coordinator on it.
  const fixture = async () => {
    const schema = freshPgSchema();
    const opened: PgStore[] = [];
    const open = async () => {
      const s = await PgStore.open({ url, schema, poolMax: 4 });
      opened.push(s);
      return s;
    };
    return {
      store: await open(),
      openAnother: open,
      cleanup: async () => {
        for (const s of opened) await s.close();
        await dropPgSchema(url, schema);
      },
    };
  };
  storeContract("postgres", fixture);
  // The database's clock cannot be moved: leases and claims run out for real (a few hundred ms).
  storeClusterContract("postgres", fixture);
});
