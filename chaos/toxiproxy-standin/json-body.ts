/**
 * Request bodies decoded the way the real server's Go `encoding/json` does for its structs:
 * unknown fields ignored, null leaves the default, a wrong type or bad JSON is a 400
 * "bad request body: ..." and an empty body is "bad request body: EOF".
 */
import type { IncomingMessage } from 'node:http';
import { API_ERRORS } from './api-errors.ts';

const MAX_BODY_BYTES = 1024 * 1024;

export async function readJsonObject(request: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of request) {
    size += (part as Buffer).length;
    if (size > MAX_BODY_BYTES) throw API_ERRORS.badRequestBody('body too large');
    parts.push(part as Buffer);
  }
  const text = Buffer.concat(parts).toString('utf8');
  if (text.trim() === '') throw API_ERRORS.badRequestBody('EOF');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw API_ERRORS.badRequestBody((err as Error).message);
  }
  if (value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw API_ERRORS.badRequestBody(`json: cannot unmarshal ${Array.isArray(value) ? 'array' : typeof value} into Go value`);
  }
  return value as Record<string, unknown>;
}

function mismatch(field: string, value: unknown, goType: string): Error {
  const jsonType = Array.isArray(value) ? 'array' : typeof value;
  return API_ERRORS.badRequestBody(`json: cannot unmarshal ${jsonType} into Go struct field .${field} of type ${goType}`);
}

export function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw mismatch(field, value, 'string');
  return value;
}

export function optionalBoolean(body: Record<string, unknown>, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') throw mismatch(field, value, 'bool');
  return value;
}

export function optionalNumber(body: Record<string, unknown>, field: string): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number') throw mismatch(field, value, 'float32');
  return value;
}

/** Toxic attributes are int64 in the real server: 1.5 or "10" is a 400. */
export function optionalInteger(body: Record<string, unknown>, field: string): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number') throw mismatch(field, value, 'int64');
  if (!Number.isSafeInteger(value)) {
    throw API_ERRORS.badRequestBody(`json: cannot unmarshal number ${value} into Go struct field .${field} of type int64`);
  }
  return value;
}

export function optionalObject(body: Record<string, unknown>, field: string): Record<string, unknown> | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw mismatch(field, value, 'struct');
  return value as Record<string, unknown>;
}
