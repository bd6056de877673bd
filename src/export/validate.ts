/**
 * A JSON Schema (draft-07) validator for the subset the Every Eval Ever schemas
 * use: type (with "integer" and type lists), required, properties,
 * additionalProperties, enum, const, items, minItems, minimum, maximum,
 * pattern, anyOf, oneOf, allOf, not, if/then/else and local $ref. Errors name
 * the JSON path and the rule that failed.
 */

export type Schema = Record<string, unknown>;

export interface SchemaError {
  path: string;
  message: string;
}

function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

function matchesType(v: unknown, t: string): boolean {
  const actual = typeOf(v);
  return actual === t || (t === "number" && actual === "integer");
}

export function validate(value: unknown, schema: Schema, root: Schema = schema, path = "$"): SchemaError[] {
  const errors: SchemaError[] = [];
  const fail = (message: string) => errors.push({ path, message });
  if (typeof schema.$ref === "string") {
    const ref = schema.$ref;
    if (!ref.startsWith("#/")) return [{ path, message: `refers to ${ref}, which is outside this schema` }];
    let target: unknown = root;
    for (const part of ref.slice(2).split("/")) target = (target as Record<string, unknown>)?.[part];
    if (!target || typeof target !== "object") return [{ path, message: `refers to ${ref}, which does not exist` }];
    return validate(value, target as Schema, root, path);
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string];
    if (!types.some((t) => matchesType(value, t))) {
      fail(`must be of type ${types.join(" or ")}, not ${typeOf(value)}`);
      return errors;
    }
  }
  if ("const" in schema && JSON.stringify(value) !== JSON.stringify(schema.const))
    fail(`must equal ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    fail(`must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}, not ${JSON.stringify(value)}`);
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) fail(`must be at least ${schema.minimum}`);
    if (typeof schema.maximum === "number" && value > schema.maximum) fail(`must be at most ${schema.maximum}`);
  }
  if (typeof value === "string" && typeof schema.pattern === "string" && !new RegExp(schema.pattern, "u").test(value)) {
    fail(`must match ${schema.pattern}`);
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems)
      fail(`must have at least ${schema.minItems} items`);
    if (schema.items && typeof schema.items === "object")
      value.forEach((v, i) => errors.push(...validate(v, schema.items as Schema, root, `${path}[${i}]`)));
  }
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    for (const key of (schema.required as string[] | undefined) ?? [])
      if (!(key in obj)) fail(`is missing required property "${key}"`);
    const props = (schema.properties as Record<string, Schema> | undefined) ?? {};
    for (const [key, v] of Object.entries(obj)) {
      if (key in props) errors.push(...validate(v, props[key]!, root, `${path}.${key}`));
      else if (schema.additionalProperties === false) fail(`has property "${key}", which is not allowed`);
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        errors.push(...validate(v, schema.additionalProperties as Schema, root, `${path}.${key}`));
      }
    }
  }
  for (const sub of (schema.allOf as Schema[] | undefined) ?? []) errors.push(...validate(value, sub, root, path));
  if (
    Array.isArray(schema.anyOf) &&
    !(schema.anyOf as Schema[]).some((s) => validate(value, s, root, path).length === 0)
  ) {
    fail("matches none of the schemas in anyOf");
  }
  if (Array.isArray(schema.oneOf)) {
    const n = (schema.oneOf as Schema[]).filter((s) => validate(value, s, root, path).length === 0).length;
    if (n !== 1) fail(`must match exactly one schema in oneOf, matches ${n}`);
  }
  if (schema.not && typeof schema.not === "object" && validate(value, schema.not as Schema, root, path).length === 0)
    fail("matches a schema it must not");
  if (schema.if && typeof schema.if === "object") {
    const holds = validate(value, schema.if as Schema, root, path).length === 0;
    const branch = holds ? schema.then : schema.else;
    if (branch && typeof branch === "object") errors.push(...validate(value, branch as Schema, root, path));
  }
  return errors;
}
