/*
 * The two lodash functions cytoscape-edgehandles 4.0.1 takes from `window._` when it is loaded by a plain
 * <script> tag (its UMD wrapper reads `root._.memoize` and `root._.throttle`): written here, small, instead of
 * vendoring lodash. Only what edgehandles uses is provided:
 *   memoize(fn, resolver): caches fn's result by resolver(...args) (else the first argument); `.cache` is a Map.
 *   throttle(fn, wait): calls fn at most once per `wait` ms, the last call of a burst at the end (trailing).
 */
(function () {
  "use strict";
  if (window._ && window._.memoize && window._.throttle) return;

  function memoize(fn, resolver) {
    const memoized = function (...args) {
      const key = resolver ? resolver.apply(this, args) : args[0];
      if (memoized.cache.has(key)) return memoized.cache.get(key);
      const result = fn.apply(this, args);
      memoized.cache.set(key, result);
      return result;
    };
    memoized.cache = new Map();
    return memoized;
  }

  function throttle(fn, wait) {
    let last = 0;
    let timer = null;
    let pending = null;
    const run = () => {
      last = Date.now();
      timer = null;
      const [self, args] = pending;
      pending = null;
      fn.apply(self, args);
    };
    const throttled = function (...args) {
      pending = [this, args];
      const left = wait - (Date.now() - last);
      if (left <= 0) {
        if (timer !== null) { clearTimeout(timer); timer = null; }
        run();
      } else if (timer === null) {
        timer = setTimeout(run, left);
      }
    };
    throttled.cancel = () => { if (timer !== null) clearTimeout(timer); timer = null; pending = null; };
    return throttled;
  }

  window._ = Object.assign(window._ || {}, { memoize, throttle });
})();
