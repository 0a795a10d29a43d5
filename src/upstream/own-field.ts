// Names from upstream are data. A field called `__proto__` must become an own field like any other,
// as JSON.parse makes it, never the object's prototype: assigning obj['__proto__'] would call
// Object.prototype's setter instead. (`constructor`, `prototype` and the rest of Object.prototype's
// names are plain own fields once assigned; only `__proto__` is an accessor.)

/** `target[key] = value` as an own, enumerable data property, whatever the key. */
export function setField(target: object, key: string, value: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else (target as Record<string, unknown>)[key] = value;
}
