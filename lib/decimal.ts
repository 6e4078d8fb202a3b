/**
 * One reading of a whole number an operator types (CLI options, query parameters): decimal digits
 * only, leading zeros allowed (`00` is 0, `010` is 10: never octal), nothing else: no sign (`-0`),
 * exponent (`1e3`), radix prefix (`0x10`), fraction, separator or blank, each of which `Number()`
 * would read as some number. Past Number.MAX_SAFE_INTEGER it is no number (`undefined`): it could
 * not be told from its neighbours. Callers check their own range and name it.
 */
export function decimalInteger(text: string): number | undefined {
  if (!/^[0-9]+$/.test(text)) return undefined;
  const digits = text.replace(/^0+(?=[0-9])/, '');
  // 16 digits hold MAX_SAFE_INTEGER; a longer run (however many leading zeros it had) is past it.
  if (digits.length > 16) return undefined;
  const n = Number(digits);
  return Number.isSafeInteger(n) ? n : undefined;
}
