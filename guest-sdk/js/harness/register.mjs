// Load before a plugin's code under Node (`node --import
// .../guest-sdk/js/harness/register.mjs --test ...`): resolves the WIT
// imports `durasync:plugin/fs@0.1.x` and `durasync:plugin/log@0.1.x` to the
// harness shims (same names as the bindings componentize-js provides, each
// call served by `durasync harness`), and a plugin's `./durasync.js` (the
// helper the component build copies beside it) to guest-sdk/js/durasync.js.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
