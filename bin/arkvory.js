#!/usr/bin/env node
// The CLI is TypeScript run by Node's built-in type stripping (Node >= 22.18 does it unflagged;
// the pinned node@24 dev dependency provides it when the system Node is older).
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(
    `arkvory needs Node >= 22.19 (this is ${process.version}); run it through npm (npm start / npx arkvory) so the pinned node@24 is used\n`,
  );
  process.exit(2);
}
await import('../proxy/commands/cli.ts');
