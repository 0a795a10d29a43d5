import Ajv2020 from 'ajv/dist/2020.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const schema = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../src/pipeline/change.schema.json'), 'utf8'),
);
const ajv = new Ajv2020.default({ allErrors: true, strict: false });
const validate = ajv.compile(schema);

/** Throws with ajv's messages when a change does not match the shipped JSON Schema. */
export function assertValidChange(change: unknown): void {
  if (!validate(change))
    throw new Error(
      `invalid change ${JSON.stringify(change).slice(0, 300)}: ${ajv.errorsText(validate.errors)}`,
    );
}
