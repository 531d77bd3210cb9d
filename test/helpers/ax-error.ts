import { isAxError } from "../../shared/errors.js";

/**
 * What `fn` throws, as `CODE: message`, for tests that check an error word for word. Fails the
 * test when `fn` does not throw, or throws anything but an AxError.
 */
export function axFailure(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (isAxError(err)) return `${err.code}: ${err.message}`;
    throw err;
  }
  throw new Error("did not throw");
}
