/**
 * The files under deploy/ as an operator installs them: env files (systemd EnvironmentFile syntax),
 * systemd and Quadlet units, and the environment a unit gives its process. Shared by the contract
 * tests that read them and the ones that run a unit's command.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import { ROOT } from './gateway.ts';

export const DEPLOY = path.join(ROOT, 'deploy');

/** `KEY=value` lines of an env file (systemd EnvironmentFile syntax without quotes). */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (t === '' || t.startsWith('#')) continue;
    const eq = t.indexOf('=');
    expect(eq, `env line without "=": ${t}`).toBeGreaterThan(0);
    env[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return env;
}

export interface Unit {
  file: string;
  text: string;
  /** Section → key → values (a key may repeat). */
  sections: Map<string, Map<string, string[]>>;
}

export function parseUnit(file: string, text: string): Unit {
  const sections = new Map<string, Map<string, string[]>>();
  let current: Map<string, string[]> | undefined;
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (t === '' || t.startsWith('#') || t.startsWith(';')) continue;
    const header = /^\[(.+)\]$/.exec(t);
    if (header) {
      current = new Map();
      sections.set(header[1]!, current);
      continue;
    }
    const eq = t.indexOf('=');
    if (!current || eq < 0) throw new Error(`${file}: unexpected line ${t}`);
    const key = t.slice(0, eq);
    current.set(key, [...(current.get(key) ?? []), t.slice(eq + 1)]);
  }
  return { file, text, sections };
}

/** A unit of deploy/systemd (or `dir`) by name. */
export async function unit(name: string, dir = 'systemd'): Promise<Unit> {
  const file = path.join(DEPLOY, dir, name);
  return parseUnit(file, await readFile(file, 'utf8'));
}

export function service(u: Unit, key: string): string[] {
  return u.sections.get('Service')?.get(key) ?? [];
}

/** The example in deploy/env of an installed env file (`/etc/arkvory/writer.env`, `-/etc/…`). */
export function envExample(installed: string, slot = '1'): string {
  return path.join(DEPLOY, 'env', path.basename(installed.replace(/^-/, '')).replace('%i', slot));
}

/** `KEY=value` of an Environment= line. */
export function environmentLine(line: string): [string, string] {
  const eq = line.indexOf('=');
  return [line.slice(0, eq), line.slice(eq + 1)];
}

/**
 * The environment a unit gives its process, with `%i` the slot and `%d` the credentials directory
 * (systemd's $CREDENTIALS_DIRECTORY): its Environment= lines, overridden by its EnvironmentFile
 * examples in order (systemd.exec: settings from these files override Environment=). `added` gives
 * the lines appended to an installed env file (what docs/deploy.md tells the operator to add, such
 * as deploy/static-store/static-store.env); `exampleSlot` is the slot whose per-slot example
 * (reader-1.env) stands for the slot's own file.
 */
export async function unitEnvironment(
  u: Unit,
  slot: string,
  credentialsDirectory = '%d',
  {
    added = () => ({}),
    exampleSlot = slot,
  }: { added?: (installed: string) => Record<string, string>; exampleSlot?: string } = {},
): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  for (const line of service(u, 'Environment')) {
    const [key, value] = environmentLine(line);
    env[key] = value.replaceAll('%i', slot).replaceAll('%d', credentialsDirectory);
  }
  for (const envFile of service(u, 'EnvironmentFile'))
    Object.assign(env, parseEnvFile(await readFile(envExample(envFile, exampleSlot), 'utf8')), added(envFile));
  return env;
}

/** LoadCredential=name:source lines: the file name under %d and the host file it is copied from. */
export function loadCredentials(u: Unit): Array<{ name: string; source: string }> {
  return service(u, 'LoadCredential').map((line) => {
    const colon = line.indexOf(':');
    return { name: line.slice(0, colon), source: line.slice(colon + 1) };
  });
}

/**
 * The logins docs/deploy.md tells the operator to create, by login name: the group role each is a
 * member of (`CREATE ROLE arkvory_gw_writer LOGIN PASSWORD '…' IN ROLE arkvory_writer;`).
 */
export async function documentedLogins(): Promise<Map<string, string>> {
  const docs = await readFile(path.join(ROOT, 'docs/deploy.md'), 'utf8');
  const logins = new Map<string, string>();
  for (const m of docs.matchAll(/CREATE ROLE (\w+)\s+LOGIN PASSWORD '…' IN ROLE (\w+);/g)) logins.set(m[1]!, m[2]!);
  expect(logins.size).toBeGreaterThan(0);
  return logins;
}
