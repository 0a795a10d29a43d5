// Runs the install scripts of exactly the dependencies package.json "allowScripts" approves
// (value true), after `npm ci --ignore-scripts` skipped every install script. The approved list
// lives in package.json only; scripts/check-supply-chain.mjs makes sure every locked package
// with install scripts is decided there. Used by .ci/run, the Dockerfile and
// scripts/verify-image-steps.sh.
// Usage: node scripts/rebuild-approved.mjs [NPM_COMMAND...]   (default: npm)
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const approved = Object.entries(pkg.allowScripts ?? {})
  .filter(([, allow]) => allow === true)
  .map(([spec]) => spec);
if (approved.length === 0) {
  console.log('rebuild-approved: package.json "allowScripts" approves no install script');
  process.exit(0);
}
const [npm, ...npmArgs] = process.argv.length > 2 ? process.argv.slice(2) : ['npm'];
console.log(`rebuild-approved: npm rebuild ${approved.join(' ')}`);
const result = spawnSync(npm, [...npmArgs, 'rebuild', ...approved], { stdio: 'inherit' });
if (result.error) throw result.error;
process.exit(result.status ?? 1);
