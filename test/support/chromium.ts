/** Debian's chromium as the browser tests drive it (playwright-core). */
export const CHROMIUM = '/usr/bin/chromium';

/** Without the background-networking flags chromium keeps calling home on a closed network. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
