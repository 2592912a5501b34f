// Validates memsnap's speedscope export against speedscope's published file-format schema
// (node_modules/speedscope, pinned in package-lock.json) with Ajv, and checks that its weights
// add up to the live set of the same query as `--format json` reports it.
// Usage: node validate_speedscope.mjs --memsnap BIN SNAPSHOT [memsnap at options...]
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, 'package.json'));
const Ajv = require('ajv');
const schema = JSON.parse(readFileSync(path.join(root, 'node_modules/speedscope/dist/release/file-format-schema.json'), 'utf8'));

const args = process.argv.slice(2);
if (args[0] !== '--memsnap' || args.length < 3) throw new Error('usage: --memsnap BIN SNAPSHOT [options]');
const [, memsnap, snapshot, ...options] = args;
const run = (format) => execFileSync(memsnap, ['at', snapshot, ...options, '--format', format], { encoding: 'utf8' });

const file = JSON.parse(run('speedscope'));
const validate = new Ajv({ allErrors: true, strict: false }).compile(schema);
if (!validate(file)) {
  console.error(JSON.stringify(validate.errors, null, 2));
  throw new Error(`${snapshot}: the speedscope export does not match speedscope's file-format schema`);
}
const profile = file.profiles[0];
const total = profile.weights.reduce((a, b) => a + b, 0);
const requested = JSON.parse(run('json')).totals.requested;
if (total !== requested || profile.endValue !== requested) {
  throw new Error(`${snapshot}: weights add up to ${total} (endValue ${profile.endValue}), the live set holds ${requested}`);
}
for (const sample of profile.samples) {
  for (const i of sample) if (!(i >= 0 && i < file.shared.frames.length)) throw new Error(`frame index ${i} out of range`);
}
console.log(`${snapshot} ${options.join(' ')}: valid speedscope file, ${profile.samples.length} stacks, ${total} bytes`);
