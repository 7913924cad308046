// Browser cases of the operator console (sbx serve --http ... --console-token), run by
// tests/integration/test_console.py: `node tests/console/console.mjs CASE` prints one JSON
// object of what the case saw (or {fatal}); the Python side asserts on it.
//
// Environment:
//   SBX_CONSOLE_URL      http://127.0.0.1:PORT (the daemon's --http)            required
//   SBX_CONSOLE_TOKEN    the daemon's --console-token                           required
//   SBX_SOCKET           the daemon's Unix socket (JSON-RPC), for what a case does beside the page
//   SBX_CONSOLE_SANDBOX  the sandbox the case works on (output, terminal, xss, actions, files)
//   SBX_CONSOLE_SHOTS    directory for one screenshot per case (CASE.png); none when unset
//   SBX_CHROMIUM         the browser (default /usr/bin/chromium)
//   SBX_CONSOLE_AUDIT_TYPE  audit: wait for an event of this type to be listed
//
// Cases: list, output, terminal, xss, actions, files, audit.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BASE = (process.env.SBX_CONSOLE_URL || '').replace(/\/$/, '');
const TOKEN = process.env.SBX_CONSOLE_TOKEN || '';
const SOCKET = process.env.SBX_SOCKET || '';
const SANDBOX = process.env.SBX_CONSOLE_SANDBOX || '';
const SHOTS = process.env.SBX_CONSOLE_SHOTS || '';
const CHROMIUM = process.env.SBX_CHROMIUM || '/usr/bin/chromium';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tid = (id, extra = '') => `[data-testid="${id}"]${extra}`;

// ------------------------------------------------------------------ the daemon's socket

class Rpc {
  constructor(sockPath) {
    this.next = 1;
    this.waiting = new Map();
    this.buf = '';
    this.sock = net.createConnection(sockPath);
    this.ready = new Promise((resolve, reject) => {
      this.sock.once('connect', resolve);
      this.sock.once('error', reject);
    });
    this.sock.on('data', (d) => {
      this.buf += d.toString('utf8');
      let i;
      while ((i = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        if (!line.trim()) continue;
        const msg = JSON.parse(line);
        const w = this.waiting.get(msg.id);
        if (!w) continue;  // a notification
        this.waiting.delete(msg.id);
        if (msg.error) w.reject(new Error(`${w.method}: ${msg.error.code} ${msg.error.message}`));
        else w.resolve(msg.result);
      }
    });
  }

  async call(method, params = {}) {
    await this.ready;
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, method });
      this.sock.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
    });
  }

  close() { this.sock.end(); }
}

async function proc(rpc, sandboxId, processId) {
  const r = await rpc.call('process.list', { sandboxId });
  return r.processes.find((p) => p.processId === processId) || null;
}

async function sandboxes(rpc) {
  return (await rpc.call('sandbox.list', {})).sandboxes;
}

async function until(fn, timeout = 10000, step = 50) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await fn();
    if (v || Date.now() > end) return v;
    await sleep(step);
  }
}

// ------------------------------------------------------------------ the page

async function signIn(page) {
  await page.goto(`${BASE}/console/#token=${encodeURIComponent(TOKEN)}`);
  await page.waitForSelector(tid('sandbox-list'));
}

async function goto(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}

async function text(page, selector) {
  return page.$eval(selector, (n) => n.textContent);
}

// The terminal's screen, one string per row, trailing blanks cut.
async function termRows(page) {
  return page.$$eval(`${tid('terminal')} .xterm-rows > div`, (rows) => rows.map((r) => r.textContent.replace(/[\s\u00a0]+$/, '')));
}

async function typeInTerminal(page, line) {
  await page.keyboard.type(line, { delay: 5 });
  await page.keyboard.press('Enter');
}

// ------------------------------------------------------------------ cases

const cases = {
  // Without the token: the page asks for it and shows nothing of the daemon; with a wrong
  // one pasted, it asks again; the right one pasted opens the list.
  async signin(page, out) {
    await page.goto(`${BASE}/console/`);
    await page.waitForSelector(tid('sign-in'));
    out.listWithout = await page.$(tid('sandbox-list')) !== null;
    await page.fill(tid('token-input'), 'wrong-token-0123456789');
    await page.press(tid('token-input'), 'Enter');
    await page.waitForSelector(tid('sign-in'));
    out.askedAgain = true;
    await page.fill(tid('token-input'), TOKEN);
    await page.press(tid('token-input'), 'Enter');
    await page.waitForSelector(tid('sandbox-list'));
    out.listWith = true;
  },


  // A sandbox made through the socket while the list is open shows within 2 s; a row leads to
  // its page; the token is gone from the address, kept in the tab's sessionStorage, and no
  // cookie holds it (a browser would send a cookie to every port of the host).
  async list(page, out, rpc) {
    await signIn(page);
    out.url = page.url();
    out.documentCookie = await page.evaluate(() => document.cookie);
    out.cookies = (await page.context().cookies()).map((c) => c.name);
    out.kept = await page.evaluate(() => sessionStorage.getItem('sbx-console-token'));
    await sleep(300);
    const { sandboxId } = await rpc.call('sandbox.create', { persist: true, label: 'console-list' });
    const t0 = Date.now();
    out.sandboxId = sandboxId;
    const row = tid('sandbox-row', `[data-id="${sandboxId}"]`);
    await page.waitForSelector(row, { timeout: 15000 });
    out.appearedMs = Date.now() - t0;
    out.label = await text(page, `${row} ${tid('sandbox-label')}`);
    out.sparkPoints = await until(async () => {
      const n = await page.$eval(`${row} ${tid('cpu-spark')}`, (s) => Number(s.dataset.points || 0));
      const m = await page.$eval(`${row} ${tid('mem-spark')}`, (s) => Number(s.dataset.points || 0));
      return n && m ? { cpu: n, mem: m } : null;
    }, 6000) || { cpu: 0, mem: 0 };
    out.health = await text(page, tid('health'));
    await page.click(`${row} ${tid('sandbox-label')}`);
    await page.waitForSelector(tid('sandbox-detail', `[data-id="${sandboxId}"]`));
    out.hashAfterClick = await page.evaluate(() => location.hash);
  },

  // `tick 2` of a process printing a tick a second shows while the process still runs.
  async output(page, out, rpc) {
    await signIn(page);
    const command = 'for i in 1 2 3 4 5; do echo tick $i; sleep 1; done';
    const { processId } = await rpc.call('process.start', { sandboxId: SANDBOX, command });
    const t0 = Date.now();
    out.processId = processId;
    await goto(page, `#/sandbox/${SANDBOX}`);
    const row = tid('process-row', `[data-id="${processId}"]`);
    await page.waitForSelector(row);
    await page.click(`${row} ${tid('view-log')}`);
    out.seen = {};
    const log = tid('process-log');
    await page.waitForSelector(log);
    await until(async () => {
      const t = await text(page, log);
      for (let i = 1; i <= 5; i++) {
        if (!out.seen[`tick ${i}`] && t.includes(`tick ${i}\n`)) {
          out.seen[`tick ${i}`] = Date.now() - t0;
          if (i === 2) {
            const p = await proc(rpc, SANDBOX, processId);
            out.atTick2 = { status: p && p.status, alive: p && p.alive };
          }
        }
      }
      return out.seen['tick 5'];
    }, 20000, 25);
    out.logState = await until(async () => {
      const s = await page.$eval(tid('log-state'), (n) => (n.dataset.ended ? n.textContent : ''));
      return s;
    }, 5000);
    out.logText = await text(page, log);
  },

  // A shell on a pty: `echo hi` answers hi on a row of its own, an OSC title sequence leaves
  // the page's title alone, the size follows the page, closing it kills the process.
  async terminal(page, out, rpc) {
    await signIn(page);
    await goto(page, `#/sandbox/${SANDBOX}`);
    await page.waitForSelector(tid('sandbox-detail'));
    out.titleBefore = await page.title();
    await page.click(tid('terminal-open'));
    out.processId = await until(() => page.$eval(tid('terminal'), (n) => n.dataset.processId || ''), 10000);
    await until(async () => (await termRows(page)).some((r) => r.trim()), 10000);
    out.prompt = (await termRows(page)).filter((r) => r.trim());
    await page.click(`${tid('terminal')} .xterm-screen`);
    await typeInTerminal(page, 'echo hi');
    out.hiLine = !!await until(async () => (await termRows(page)).some((r) => r.trim() === 'hi'), 10000);
    out.rowsAtHi = (await termRows(page)).filter((r) => r.trim());
    await typeInTerminal(page, "printf '\\033]0;pwned\\007'; echo title-done");
    await until(async () => (await termRows(page)).some((r) => r.trim() === 'title-done'), 10000);
    await sleep(300);
    out.titleAfter = await page.title();
    const sizeRows = async () => (await termRows(page)).map((r) => r.trim()).filter((r) => /^\d+ \d+$/.test(r));
    await typeInTerminal(page, 'stty size');
    out.stty = [await until(async () => (await sizeRows())[0], 10000)];
    await page.setViewportSize({ width: 900, height: 900 });
    await sleep(800);
    await typeInTerminal(page, 'clear; stty size');
    out.stty.push(await until(async () => {
      const s = await sizeRows();
      const last = s[s.length - 1];
      return last && last !== out.stty[0] ? last : null;
    }, 10000));
    out.rows = (await termRows(page)).filter((r) => r.trim());
    const p = await proc(rpc, SANDBOX, out.processId);
    out.process = p && { command: p.command, pty: p.pty, alive: p.alive, status: p.status };
    await snap(page, out);
    await page.click(tid('terminal-close'));
    out.aliveAfterClose = await until(async () => {
      const q = await proc(rpc, SANDBOX, out.processId);
      return q && !q.alive ? 'gone' : null;
    }, 8000) ? false : true;
    out.titleEnd = await page.title();
  },

  // Markup from a sandbox (a label, metadata, output, a file's name and content, a command)
  // stays text: no element made from it, no dialog.
  async xss(page, out, rpc) {
    await signIn(page);
    const row = tid('sandbox-row', `[data-id="${SANDBOX}"]`);
    await page.waitForSelector(row);
    await until(async () => (await text(page, `${row} ${tid('sandbox-metadata')}`)).length > 0, 5000);
    out.rowLabel = await text(page, `${row} ${tid('sandbox-label')}`);
    out.rowMetadata = await text(page, `${row} ${tid('sandbox-metadata')}`);
    out.elementsInRow = await page.$eval(row, (r) => r.querySelectorAll('b, img, script, i').length);
    const command = "echo '<img src=x onerror=alert(1)>'; echo '<script>alert(2)</script>'";
    const { processId } = await rpc.call('process.start', { sandboxId: SANDBOX, command, label: '<i>lbl</i>' });
    out.processId = processId;
    const fname = '<img src=x onerror=alert(3)>.txt';
    await rpc.call('files.write', { sandboxId: SANDBOX, path: `/home/user/${fname}`,
      data: Buffer.from('<script>alert(4)</script>\n').toString('base64') });
    await goto(page, `#/sandbox/${SANDBOX}`);
    const prow = tid('process-row', `[data-id="${processId}"]`);
    await page.waitForSelector(prow);
    out.commandCell = await page.$eval(prow, (r) => r.cells[2].textContent);
    out.labelCell = await page.$eval(prow, (r) => r.cells[3].textContent);
    await page.click(`${prow} ${tid('view-log')}`);
    const log = tid('process-log');
    await page.waitForSelector(log);
    out.logText = await until(async () => {
      const t = await text(page, log);
      return t.includes('</script>') ? t : null;
    }, 10000);
    out.elementsInLog = await page.$eval(log, (n) => n.querySelectorAll('img, script, b, i').length);
    out.detailLabel = await text(page, tid('detail-label'));
    await page.click(tid('files-refresh'));
    const entry = `${tid('file-entry')}[data-name="${fname.replace(/"/g, '\\"')}"]`;
    await page.waitForSelector(entry);
    out.fileEntry = await page.$eval(entry, (r) => r.cells[0].textContent);
    await page.click(`${entry} ${tid('file-open')}`);
    out.fileView = await until(async () => {
      const t = await page.$eval(tid('file-view'), (n) => (n.hidden ? '' : n.textContent));
      return t || null;
    }, 5000);
    await sleep(500);  // time for any injected handler to fire
    out.imgInPage = await page.$$eval('img', (n) => n.length);
    out.scripts = await page.$$eval('script', (n) => n.map((s) => s.getAttribute('src')));
    out.elementsInFiles = await page.$eval(tid('files'), (n) => n.querySelectorAll('img, script').length);
  },

  // Kill, pause, resume, fork, destroy, each as the page shows it and as the daemon has it.
  async actions(page, out, rpc) {
    await signIn(page);
    const { processId } = await rpc.call('process.start', { sandboxId: SANDBOX, command: 'sleep 1000' });
    out.processId = processId;
    await goto(page, `#/sandbox/${SANDBOX}`);
    const prow = tid('process-row', `[data-id="${processId}"]`);
    await page.waitForSelector(prow);
    out.statusBefore = await text(page, `${prow} ${tid('process-status')}`);
    await page.click(`${prow} ${tid('action-kill')}`);
    out.statusAfterKill = await until(async () => {
      const t = await text(page, `${prow} ${tid('process-status')}`);
      return t.startsWith('running') ? null : t;
    }, 10000);
    const p = await proc(rpc, SANDBOX, processId);
    out.killed = { status: p.status, alive: p.alive };

    const detail = tid('sandbox-detail');
    await page.click(tid('action-pause'));
    await page.waitForSelector(`${detail} ${tid('paused-badge')}`);
    out.pausedSocket = (await sandboxes(rpc)).find((s) => s.sandboxId === SANDBOX).paused;
    await goto(page, '#/');
    out.pausedInList = !!await page.waitForSelector(`${tid('sandbox-row', `[data-id="${SANDBOX}"]`)} ${tid('paused-badge')}`);
    await goto(page, `#/sandbox/${SANDBOX}`);
    await page.waitForSelector(`${detail} ${tid('paused-badge')}`);
    await page.waitForSelector(`${tid('action-resume')}:not([disabled])`);
    await page.click(tid('action-resume'));
    await page.waitForSelector(`${detail} ${tid('paused-badge')}`, { state: 'detached' });
    out.resumedSocket = !(await sandboxes(rpc)).find((s) => s.sandboxId === SANDBOX).paused;

    await page.waitForSelector(`${tid('action-fork')}:not([disabled])`);
    await page.click(tid('action-fork'));
    const childLink = `${tid('fork-tree')} ${tid('fork-child')}`;
    await page.waitForSelector(childLink, { timeout: 20000 });
    const child = await page.$eval(childLink, (a) => a.dataset.id);
    out.child = child;
    out.childForkOfSocket = ((await sandboxes(rpc)).find((s) => s.sandboxId === child) || {}).forkOf;
    await page.click(`nav a[data-nav="list"]`);
    const crow = tid('sandbox-row', `[data-id="${child}"]`);
    await page.waitForSelector(crow);
    out.childForkOfList = await page.$eval(`${crow} ${tid('fork-of')}`, (n) => n.dataset.id);
    await page.click(`${crow} ${tid('sandbox-label')}`);
    await page.waitForSelector(tid('sandbox-detail', `[data-id="${child}"]`));
    out.childParentLink = await page.$eval(`${tid('fork-tree')} ${tid('fork-parent')}`, (n) => n.dataset.id);

    await page.waitForSelector(`${tid('action-destroy')}:not([disabled])`);
    await page.click(tid('action-destroy'));
    await page.click(tid('confirm-no'));
    await sleep(300);
    out.afterNo = (await sandboxes(rpc)).some((s) => s.sandboxId === child);
    await page.click(tid('action-destroy'));
    await page.click(tid('confirm-yes'));
    await page.waitForSelector(tid('sandbox-list'));
    out.hashAfterDestroy = await page.evaluate(() => location.hash);
    await page.waitForSelector(crow, { state: 'detached', timeout: 5000 });
    out.rowGone = !(await page.$(crow));
    out.childInSocketList = (await sandboxes(rpc)).some((s) => s.sandboxId === child);
    out.parentRow = !!(await page.$(tid('sandbox-row', `[data-id="${SANDBOX}"]`)));
  },

  // The files panel: /home/user, a file's text, a subdirectory, the breadcrumb, the 64 KiB cap.
  async files(page, out) {
    await signIn(page);
    await goto(page, `#/sandbox/${SANDBOX}`);
    await page.waitForSelector(`${tid('files')} ${tid('file-entry')}`);
    const entries = () => page.$$eval(`${tid('files')} ${tid('file-entry')}`, (rs) => rs.map((r) => [r.dataset.name, r.dataset.type]));
    out.entries = await entries();
    out.breadcrumb = await text(page, tid('files-breadcrumb'));
    const open = async (name) => {
      await page.click(`${tid('file-entry')}[data-name="${name}"] ${tid('file-open')}`);
    };
    const view = async (want) => until(async () => {
      const t = await page.$eval(tid('file-view'), (n) => (n.hidden ? null : n.textContent));
      return t !== null && (!want || t.startsWith(want)) ? t : null;
    }, 5000);
    await open('console-file.txt');
    out.fileView = await view('hello');
    out.fileHead = await text(page, tid('file-head'));
    await open('big.txt');
    out.bigShown = (await view('x')).length;
    out.bigHead = await text(page, tid('file-head'));
    await open('sub');
    await page.waitForSelector(`${tid('file-entry')}[data-name="inner.txt"]`);
    out.subEntries = await entries();
    out.subBreadcrumb = await text(page, tid('files-breadcrumb'));
    await page.click(`${tid('files-breadcrumb')} [data-path="/home/user"]`);
    await page.waitForSelector(`${tid('file-entry')}[data-name="console-file.txt"]`);
    out.backEntries = await entries();
    out.backBreadcrumb = await text(page, tid('files-breadcrumb'));
  },

  // The audit page: recent events, each its JSON line, and the chain's state after verify.
  // The log is written behind the daemon's back: with SBX_CONSOLE_AUDIT_TYPE, the case waits
  // (the page polls) until an event of that type is listed.
  async audit(page, out) {
    await signIn(page);
    await page.click('nav a[data-nav="audit"]');
    await page.waitForSelector(`${tid('audit')} ${tid('audit-event')}`);
    if (process.env.SBX_CONSOLE_AUDIT_TYPE) {
      await page.waitForSelector(`${tid('audit-event')}[data-type="${process.env.SBX_CONSOLE_AUDIT_TYPE}"]`, { timeout: 15000 });
    }
    out.events = await page.$$eval(tid('audit-event'), (rs) => rs.map((r) => r.textContent));
    out.health = await text(page, tid('audit-health'));
    out.chainBefore = await text(page, tid('audit-chain'));
    await page.click(tid('audit-verify'));
    out.chain = await until(async () => {
      const ok = await page.$eval(tid('audit-chain'), (n) => n.dataset.ok);
      return ok === undefined ? null : await text(page, tid('audit-chain'));
    }, 10000);
    out.chainOk = await page.$eval(tid('audit-chain'), (n) => n.dataset.ok === '1');
  },
};

// The case's screenshot, taken where the case says (else at its end, or where it failed).
async function snap(page, out) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  out.shot = path.join(SHOTS, `${out.case}.png`);
  await page.screenshot({ path: out.shot, fullPage: true }).catch((e) => { out.shotError = String(e); });
}

// ------------------------------------------------------------------ main

async function main() {
  const name = process.argv[2];
  const out = { case: name, dialogs: [], pageErrors: [], consoleErrors: [], failedRequests: [] };
  if (!cases[name]) {
    out.fatal = `unknown case ${name}: one of ${Object.keys(cases).join(', ')}`;
    return out;
  }
  if (!BASE || !TOKEN) {
    out.fatal = 'SBX_CONSOLE_URL and SBX_CONSOLE_TOKEN are required';
    return out;
  }
  const rpc = SOCKET ? new Rpc(SOCKET) : null;
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.setDefaultTimeout(10000);
  page.on('dialog', (d) => { out.dialogs.push({ type: d.type(), message: d.message() }); d.dismiss().catch(() => {}); });
  page.on('pageerror', (e) => out.pageErrors.push(String(e && e.stack || e)));
  page.on('console', (m) => { if (m.type() === 'error') out.consoleErrors.push(m.text()); });
  page.on('requestfailed', (r) => {
    // EventSources a page closes on purpose end as aborted requests; they are not failures.
    if (!/ERR_ABORTED/.test(r.failure()?.errorText || '')) out.failedRequests.push(`${r.url()} ${r.failure()?.errorText}`);
  });
  const t0 = Date.now();
  try {
    await cases[name](page, out, rpc);
  } catch (e) {
    out.fatal = String(e && e.stack || e);
  } finally {
    out.ms = Date.now() - t0;
    if (!out.shot || out.fatal) await snap(page, out);
    await browser.close();
    if (rpc) rpc.close();
  }
  return out;
}

main().then((out) => {
  process.stdout.write(JSON.stringify(out) + '\n');
}, (e) => {
  process.stdout.write(JSON.stringify({ fatal: String(e && e.stack || e) }) + '\n');
});
