/**
 * `Promise.withResolvers` (ES2024) for Node 20: the Restate TypeScript SDK 1.17 is built for Node 22
 * and calls it; on Node 20 its handlers fail with "Promise.withResolvers is not a function". This
 * installs it only when missing, as the spec defines it: a static method that builds a promise of
 * the `this` constructor (NewPromiseCapability(C), a TypeError when C is not a constructor) and
 * returns `{ promise, resolve, reject }`; writable, configurable, not enumerable, like the built-in.
 * Loaded before the SDK (restate.ts imports it first).
 */
type Resolvers = { promise: Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void };

const P = Promise as unknown as { withResolvers?: unknown };
if (typeof P.withResolvers !== 'function') {
  Object.defineProperty(Promise, 'withResolvers', {
    value: function withResolvers(this: PromiseConstructor): Resolvers {
      if (typeof this !== 'function') throw new TypeError('Promise.withResolvers called on a non-constructor');
      let resolve!: (v: unknown) => void;
      let reject!: (e: unknown) => void;
      const promise = new this<unknown>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    },
    writable: true,
    enumerable: false,
    configurable: true,
  });
}

export {};
