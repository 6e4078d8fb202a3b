/**
 * Whether a process with this id exists: signal 0 checks without sending anything. A process of
 * another user answers EPERM, and exists all the same.
 */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
