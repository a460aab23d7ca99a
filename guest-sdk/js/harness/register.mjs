// Load before a plugin's code under Node (`node --import
// durasync-guest/register --test ...` with the package installed): resolves
// the WIT imports `durasync:plugin/fs@0.1.x` and `durasync:plugin/log@0.1.x`
// to the harness shims (same names as the bindings componentize-js provides,
// each call served by `durasync harness`), and a plugin's `./durasync.js`
// (the helper the component build copies beside it) to this package's
// durasync.js when the plugin's folder has none.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
