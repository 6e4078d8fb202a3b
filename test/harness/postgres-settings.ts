/** `-c name=value` for each setting, as the `postgres` server takes them on its command line. */
export function postgresSettings(settings: Record<string, string | number>): string[] {
  return Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]);
}
