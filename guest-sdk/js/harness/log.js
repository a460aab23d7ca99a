// The harness twin of `durasync:plugin/log@0.1.0` as componentize-js binds
// it: `log(level, message)` with level "debug" | "info" | "warn" | "error".
import { current } from "./harness.js";

export function log(level, message) {
  current().call("log", { level, message });
}
