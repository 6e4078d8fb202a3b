/**
 * The README tables that are generated from code (variables, error codes) and checked by
 * test/contract. `npm run docs` rewrites them between their markers.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describeAllowed, VARIABLES } from '../../proxy/config/config.ts';
import type { ErrorEntry } from '../../lib/coded-error.ts';
import { ERROR_CATALOGUE } from '../../proxy/server/http-errors.ts';
import { REPO_ROOT } from '../harness/paths.ts';
import { AUDIT_ACTIONS } from '../../proxy/audit/audit-event.ts';
import { FUNCTION_GRANTS, RUNTIME_ROLES, SEQUENCE_GRANTS, TABLE_GRANTS } from '../../migrations/grants.ts';
export const README = path.join(REPO_ROOT, 'README.md');
export const OBSERVABILITY = path.join(REPO_ROOT, 'docs', 'observability.md');
export const DEPLOY = path.join(REPO_ROOT, 'docs', 'deploy.md');

const GRANT_ABBREVIATIONS: Readonly<Record<string, string>> = {
  SELECT: 'S',
  INSERT: 'I',
  UPDATE: 'U',
  DELETE: 'D',
  USAGE: 'use',
  EXECUTE: 'X',
};

/** One privilege as the grants table spells it: `S`, `U(a, b)`, `I(a, b)`, `use`, `X`. */
function abbreviated(privilege: string): string {
  const columns = /^(UPDATE|INSERT)\s*\((.*)\)$/.exec(privilege);
  return columns ? `${GRANT_ABBREVIATIONS[columns[1]!]}(${columns[2]})` : (GRANT_ABBREVIATIONS[privilege] ?? privilege);
}

/** What each runtime role may do to every table, sequence and function (migrations/grants.ts), for docs/deploy.md. */
export function grantsTable(): string {
  const rows = [TABLE_GRANTS, SEQUENCE_GRANTS, FUNCTION_GRANTS].flatMap((decisions) =>
    Object.entries(decisions as Readonly<Record<string, Readonly<Record<string, readonly string[]>>>>).map(
      ([object, decision]) =>
        `| \`${object}\` | ${RUNTIME_ROLES.map((role) => decision[role]?.map(abbreviated).join(', ') || '—').join(' | ')} |`,
    ),
  );
  return [`| object | ${RUNTIME_ROLES.join(' | ')} |`, `| --- |${' --- |'.repeat(RUNTIME_ROLES.length)}`, ...rows].join(
    '\n',
  );
}

/** The audit trail's actions (proxy/audit/audit-event.ts), for docs/observability.md. */
export function auditActionsTable(): string {
  return [
    '| action | recorded when |',
    '| --- | --- |',
    ...Object.entries(AUDIT_ACTIONS).map(([action, meaning]) => `| \`${action}\` | ${meaning} |`),
  ].join('\n');
}

export function variablesTable(): string {
  const rows = VARIABLES.map(
    (v) =>
      `| \`${v.name}\` | ${v.defaultValue === undefined ? '(unset)' : `\`${v.defaultValue}\``} | ${describeAllowed(v)} | ${v.doc} |`,
  );
  return ['| variable | default | allowed | meaning |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

const CATALOGUE_ROWS = Object.entries(ERROR_CATALOGUE.entries) as [string, ErrorEntry][];

/** The codes a response can carry, by status: code, status, meaning, what to do (from the catalogue). */
export function errorsTable(): string {
  const rows = CATALOGUE_ROWS.flatMap(([code, e]) => (e.status === null ? [] : [{ code, status: e.status, e }]))
    .sort((a, b) => a.status - b.status || a.code.localeCompare(b.code))
    .map(({ code, status, e }) => `| \`${code}\` | ${status} | ${e.message} | ${e.advice} |`);
  return ['| code | status | meaning | what to do |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

/** The codes only a command or a refused start reports (no HTTP status), by code. */
export function processErrorsTable(): string {
  const rows = CATALOGUE_ROWS.filter(([, e]) => e.status === null)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([code, e]) => `| \`${code}\` | ${e.message} | ${e.advice} |`);
  return ['| code | meaning | what to do |', '| --- | --- | --- |', ...rows].join('\n');
}

/** The rule schema, the one source of a rate-limit rule's shape (policy/rate-limit/rule.schema.json). */
export const RULE_SCHEMA_FILE = path.join(REPO_ROOT, 'policy/rate-limit/rule.schema.json');
/** The OpenAPI documents whose `Rule` component is generated from it. */
export const RULE_SCHEMA_DOCUMENTS = ['proxy/openapi/openapi.yaml', 'proxy/openapi/rules-service.yaml'].map((f) =>
  path.join(REPO_ROOT, f),
);

/** The `Rule` component as the OpenAPI documents carry it: the schema without its JSON Schema header. */
export async function ruleComponent(): Promise<Record<string, unknown>> {
  const { $schema: _s, $id: _i, title: _t, ...component } = JSON.parse(await readFile(RULE_SCHEMA_FILE, 'utf8'));
  return component;
}

/** `yaml` with its `components.schemas.Rule` block replaced by `component` (JSON is YAML's flow style). */
export function withRuleComponent(yaml: string, component: Record<string, unknown>): string {
  const lines = yaml.split('\n');
  const start = lines.indexOf('    Rule:');
  if (start === -1) throw new Error('no components.schemas.Rule block (a line "    Rule:")');
  let end = start + 1;
  while (end < lines.length && (lines[end]!.startsWith('      ') || lines[end]!.trim() === '')) end++;
  const body = JSON.stringify(component, null, 2)
    .split('\n')
    .map((l) => `      ${l}`);
  const generated = [
    '      # generated from policy/rate-limit/rule.schema.json by `npm run docs`; edit the schema, not this',
    ...body,
  ];
  return [...lines.slice(0, start + 1), ...generated, ...lines.slice(end)].join('\n');
}

export function section(text: string, name: string): string | undefined {
  const start = text.indexOf(`<!-- ${name}:start -->`);
  const end = text.indexOf(`<!-- ${name}:end -->`);
  if (start === -1 || end === -1) return undefined;
  return text.slice(start + `<!-- ${name}:start -->`.length, end).trim();
}

function replaceSection(text: string, name: string, body: string): string {
  const start = text.indexOf(`<!-- ${name}:start -->`);
  const end = text.indexOf(`<!-- ${name}:end -->`);
  if (start === -1 || end === -1) throw new Error(`README has no <!-- ${name}:start/end --> markers`);
  return `${text.slice(0, start)}<!-- ${name}:start -->\n${body}\n${text.slice(end)}`;
}

if (process.argv[1] && import.meta.url.endsWith(path.basename(process.argv[1]))) {
  let text = await readFile(README, 'utf8');
  text = replaceSection(text, 'variables', variablesTable());
  text = replaceSection(text, 'errors', errorsTable());
  text = replaceSection(text, 'process-errors', processErrorsTable());
  await writeFile(README, text);
  await writeFile(
    OBSERVABILITY,
    replaceSection(await readFile(OBSERVABILITY, 'utf8'), 'audit-actions', auditActionsTable()),
  );
  await writeFile(DEPLOY, replaceSection(await readFile(DEPLOY, 'utf8'), 'grants', grantsTable()));
  const component = await ruleComponent();
  for (const file of RULE_SCHEMA_DOCUMENTS)
    await writeFile(file, withRuleComponent(await readFile(file, 'utf8'), component));
  process.stdout.write('README tables and OpenAPI Rule components rewritten\n');
}
