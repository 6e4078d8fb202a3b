/** Restore order of tables from their foreign keys. Pure. */

/**
 * Every table after the tables it references (ties by name, so the order is stable); a reference
 * cycle or a self-reference does not block: such edges are ignored for ordering.
 */
export function tablesInDependencyOrder(
  tables: readonly string[],
  references: ReadonlyArray<{ child: string; parent: string }>,
): string[] {
  const known = new Set(tables);
  const parents = new Map<string, Set<string>>(tables.map((t) => [t, new Set<string>()]));
  for (const { child, parent } of references) {
    if (child !== parent && known.has(child) && known.has(parent)) parents.get(child)!.add(parent);
  }
  const order: string[] = [];
  const placed = new Set<string>();
  const remaining = [...tables].sort();
  while (remaining.length) {
    const next = remaining.find((t) => [...parents.get(t)!].every((p) => placed.has(p))) ?? remaining[0]!;
    order.push(next);
    placed.add(next);
    remaining.splice(remaining.indexOf(next), 1);
  }
  return order;
}
