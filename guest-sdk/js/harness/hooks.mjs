// Module resolution hooks of the harness (see register.mjs).
const SHIMS = {
  fs: new URL("./fs.js", import.meta.url).href,
  log: new URL("./log.js", import.meta.url).href,
};
const HELPER = new URL("../durasync.js", import.meta.url).href;
// This package's own names, for code run from a checkout where it is not
// installed in node_modules (installed, Node resolves them itself).
const OWN = {
  "durasync-guest": HELPER,
  "durasync-guest/durasync.js": HELPER,
  "durasync-guest/harness": new URL("./harness.js", import.meta.url).href,
};
// The contract this harness speaks: any 0.1.x (the host links 0.1.y to 0.1.x).
const WIT = /^durasync:plugin\/(fs|log)@0\.1\.\d+$/;

export async function resolve(specifier, context, next) {
  const m = WIT.exec(specifier);
  if (m) {
    return { url: SHIMS[m[1]], format: "module", shortCircuit: true };
  }
  const fallback = specifier === "./durasync.js" ? HELPER : OWN[specifier];
  if (fallback) {
    try {
      return await next(specifier, context);
    } catch (e) {
      if (e && e.code === "ERR_MODULE_NOT_FOUND") {
        return { url: fallback, format: "module", shortCircuit: true };
      }
      throw e;
    }
  }
  return next(specifier, context);
}
