/**
 * Test files that mock a module (`vi.mock`): each runs in the `own-graph` project (vitest.config.ts),
 * with a module graph of its own, since the unit and integration projects share one graph per worker
 * (`isolate: false`) and a mock there would reach the files after it. test/contract/own-graph.test.ts
 * checks that this list names exactly the files that mock.
 */
export const OWN_GRAPH: readonly string[] = [
  'proxy/rules-service/query-tokens.test.ts',
  'storage-adapter/slice-cache/slice-open-errors.int.test.ts',
];
