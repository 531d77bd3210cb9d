export * from "./codec.js";
export * from "./envelope.js";
export * from "./event.js";
export * from "./execution.js";
export * from "./messages.js";
export * from "./presence.js";
export * from "./session.js";
export * from "./topics.js";
