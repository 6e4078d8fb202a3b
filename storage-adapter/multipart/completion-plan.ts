/**
 * Pure check of a completion request against the parts received: the client lists every part it
 * wants assembled, once each, ascending, with the sha256 it sent; anything else publishes nothing.
 */
import { StorageError } from '../errors.ts';

export interface ReceivedPart {
  partNumber: number;
  sizeBytes: number;
  sha256: string;
}

export interface ListedPart {
  partNumber: number;
  sha256: string;
}

/** The most parts a session takes, and so the highest part number (parts are numbered from 1). */
export const MAX_PARTS = 10_000;

/** Parses the `parts` field of a completion body; a malformed list is `invalid_request`. */
export function parseListedParts(value: unknown): ListedPart[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_PARTS) {
    throw new StorageError(
      'invalid_request',
      `parts must be a list of 1 to ${MAX_PARTS} { partNumber, sha256 } objects`,
    );
  }
  return value.map((item, i) => {
    const p = item as { partNumber?: unknown; sha256?: unknown };
    if (
      // A number or string item has no partNumber: refused below.
      !p ||
      !Number.isInteger(p.partNumber) ||
      // A number no part can be sent under is the list's fault, not a missing or misplaced part.
      (p.partNumber as number) < 1 ||
      (p.partNumber as number) > MAX_PARTS ||
      // Stryker disable next-line ConditionalExpression: equivalent: the pattern refuses what a non-string becomes as text
      typeof p.sha256 !== 'string' ||
      !/^[0-9a-f]{64}$/.test(p.sha256)
    ) {
      throw new StorageError(
        'invalid_request',
        `parts[${i}] must be { partNumber: integer 1 to ${MAX_PARTS}, sha256: 64 lowercase hex }`,
      );
    }
    return { partNumber: p.partNumber as number, sha256: p.sha256 };
  });
}

/**
 * The ordered parts to assemble and their total size, or the first reason to refuse:
 * `parts_out_of_order`, `part_missing`, `part_mismatch`, or `invalid_request` for a size that
 * cannot match the session's expected size.
 */
export function planCompletion(
  listed: readonly ListedPart[],
  received: readonly ReceivedPart[],
  expectedSize: number | null,
): { parts: ReceivedPart[]; totalBytes: number } {
  const byNumber = new Map(received.map((p) => [p.partNumber, p]));
  const parts: ReceivedPart[] = [];
  let previous = 0;
  for (const item of listed) {
    if (item.partNumber <= previous)
      throw new StorageError(
        'parts_out_of_order',
        `part ${item.partNumber} is listed after part ${previous}; list each part once, ascending`,
      );
    previous = item.partNumber;
    const part = byNumber.get(item.partNumber);
    if (!part) throw new StorageError('part_missing', `part ${item.partNumber} was never received`);
    if (part.sha256 !== item.sha256)
      throw new StorageError(
        'part_mismatch',
        `part ${item.partNumber} was received with sha256 ${part.sha256}, not ${item.sha256}`,
      );
    parts.push(part);
  }
  const totalBytes = parts.reduce((sum, p) => sum + p.sizeBytes, 0);
  if (expectedSize !== null && totalBytes !== expectedSize) {
    throw new StorageError(
      'invalid_request',
      `the listed parts add up to ${totalBytes} bytes; the session expects ${expectedSize}`,
    );
  }
  return { parts, totalBytes };
}
