import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import {
  auditActionsTable,
  DEPLOY,
  errorsTable,
  grantsTable,
  OBSERVABILITY,
  processErrorsTable,
  README,
  section,
  variablesTable,
} from '../support/readme-tables.ts';

describe('README contract', () => {
  it('lists every ARKVORY_* variable exactly as the config table declares it (npm run docs regenerates)', async () => {
    expect(section(await readFile(README, 'utf8'), 'variables')).toBe(variablesTable());
  });

  it('lists every error code with its status, both ways (npm run docs regenerates)', async () => {
    expect(section(await readFile(README, 'utf8'), 'errors')).toBe(errorsTable());
  });

  it('lists every code of commands and refused starts, both ways (npm run docs regenerates)', async () => {
    expect(section(await readFile(README, 'utf8'), 'process-errors')).toBe(processErrorsTable());
  });

  it('docs/observability.md lists every audit action, both ways (npm run docs regenerates)', async () => {
    expect(section(await readFile(OBSERVABILITY, 'utf8'), 'audit-actions')).toBe(auditActionsTable());
  });

  it("docs/deploy.md shows every runtime role's grants as migrations/grants.ts gives them (npm run docs regenerates)", async () => {
    expect(section(await readFile(DEPLOY, 'utf8'), 'grants')).toBe(grantsTable());
  });

  it('names the start and test commands near the top', async () => {
    const top = (await readFile(README, 'utf8')).slice(0, 2500);
    expect(top).toContain('npm start');
    expect(top).toContain('npm test');
  });
});
