/*
 * Limits of over-the-air updates both ends and the A/B launcher agree on, in a module of their
 * own: the launcher (agent/launch.ts) is built from Node built-ins and this, nothing else.
 */

/** Starts a new version gets to register before its device goes back to the previous one. */
export const MAX_TRIAL_STARTS = 3;

/** Default and bounds of the health window: how long a new agent has to register per start. */
export const DEFAULT_HEALTH_WINDOW_MS = 60_000;
export const MIN_HEALTH_WINDOW_MS = 1_000;
export const MAX_HEALTH_WINDOW_MS = 3_600_000;
