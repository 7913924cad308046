// The sbx operator console: one page, hash routing (#/, #/sandbox/ID, #/audit), talking to the
// daemon through POST api/rpc and the process.stream event stream.
//
// Everything a sandbox can influence (output, names, labels, metadata, commands, audit events)
// is untrusted: it only ever enters the page as text nodes, never as markup, and the page has
// no dialogs (alert/confirm/prompt), so a dialog in the tests means an injection.
'use strict';

(function () {
  const view = document.getElementById('view');
  const statusLine = document.querySelector('[data-testid="status-line"]');
  const healthStrip = document.querySelector('[data-testid="health"]');
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const LOG_KEEP_CHARS = 2 * 1024 * 1024;
  const FILE_SHOW_BYTES = 64 * 1024;

  // ---------------------------------------------------------------- DOM helpers

  // el('td', {class: 'x', testid: 'y', 'data-id': id}, 'text', child...). Strings become text
  // nodes; attributes are plain values set with setAttribute, and event-handler attributes are
  // refused outright so that no caller can turn data into script by accident.
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, kids);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (/^on/i.test(k) || k === 'style') throw new Error('refused attribute ' + k);
      node.setAttribute(k === 'testid' ? 'data-testid' : k, v === true ? '' : String(v));
    }
  }

  function append(node, kids) {
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function button(label, attrs, onClick) {
    const b = el('button', Object.assign({ type: 'button' }, attrs), label);
    b.addEventListener('click', (e) => { e.stopPropagation(); onClick(e); });
    return b;
  }

  function sandboxLink(id, attrs) {
    return el('a', Object.assign({ href: '#/sandbox/' + encodeURIComponent(id), 'data-id': id, class: 'mono' }, attrs),
      shortId(id));
  }

  function shortId(id) {
    return String(id).slice(0, 12);
  }

  // Keeps the rows of a table body in the order of items, reusing the row of each key so that
  // a poll never replaces a button under the pointer.
  function syncRows(tbody, items, key, create, update) {
    const old = new Map();
    for (const tr of Array.from(tbody.children)) {
      if (tr.dataset.key !== undefined) old.set(tr.dataset.key, tr);
      else tr.remove();
    }
    let prev = null;
    for (const item of items) {
      const k = String(key(item));
      let tr = old.get(k);
      if (tr) old.delete(k);
      else { tr = create(item); tr.dataset.key = k; }
      update(tr, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of old.values()) tr.remove();
  }

  function table(testid, heads) {
    const tbody = el('tbody');
    const t = el('table', { testid, class: 'grid' }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', {}, h)))), tbody);
    return { table: t, tbody };
  }

  function emptyRow(tbody, cols, text) {
    if (tbody.children.length) return;
    tbody.appendChild(el('tr', { class: 'empty' }, el('td', { colspan: cols }, text)));
  }

  // ---------------------------------------------------------------- formatting

  function fmtBytes(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n < 10 ? 1 : 0) : String(n)) + ' ' + units[i];
  }

  // The protocol's times: ms since the epoch, or ISO 8601 text (sandbox.list's createdAt).
  function toMs(v) {
    if (typeof v === 'number') return v;
    const t = typeof v === 'string' ? Date.parse(v) : NaN;
    return isFinite(t) ? t : NaN;
  }

  function fmtAge(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) return '–';
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
  }

  function fmtTime(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) return '–';
    return new Date(ms).toLocaleString();
  }

  function fmtPct(x) {
    return typeof x === 'number' && isFinite(x) ? x.toFixed(1) + '%' : '–';
  }

  // ---------------------------------------------------------------- talking to the daemon

  class RpcError extends Error {
    constructor(method, code, message, data) {
      super(method + ': ' + message);
      this.code = code;
      this.data = data;
    }
  }

  // The console's token: given once in the address (#token=..., which no server, log or
  // referrer sees), kept in this tab's sessionStorage (which no other origin, another port of
  // 127.0.0.1 included, can read) and sent as a bearer on every call. Never a cookie: a browser
  // sends cookies to every port of a host, a sandbox's exposed ports among them.
  const TOKEN_KEY = 'sbx-console-token';
  (function takeToken() {
    const m = /^#token=([A-Za-z0-9._~-]+)$/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, m[1]);
      history.replaceState(null, '', location.pathname + '#/');
    }
  })();
  function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
  function authHeaders(extra) {
    return Object.assign({ Authorization: 'Bearer ' + token() }, extra || {});
  }

  async function rpc(method, params) {
    let res;
    try {
      res = await fetch('api/rpc', {
        method: 'POST',
        credentials: 'omit',
        headers: authHeaders({ 'Content-Type': 'application/json', 'X-Sbx-Console': '1' }),
        body: JSON.stringify({ method, params: params || {} }),
      });
    } catch (e) {
      throw new RpcError(method, 0, 'the daemon is unreachable (' + e.message + ')');
    }
    let body = null;
    try { body = await res.json(); } catch (e) { /* a non-JSON answer is reported below by its status */ }
    if (res.status === 401) {
      showSignIn();
      throw new RpcError(method, 401, 'not signed in: open the console: URL that sbx serve printed');
    }
    if (body && body.error) {
      const err = body.error;
      throw new RpcError(method, err.code, typeof err.message === 'string' ? err.message : JSON.stringify(err), err.data);
    }
    if (!res.ok || !body || !('result' in body)) throw new RpcError(method, res.status, 'HTTP ' + res.status);
    return body.result;
  }

  // Without a token (or with a wrong one): a field to paste it into, instead of the page.
  let signInShown = false;
  function showSignIn() {
    if (signInShown) return;
    signInShown = true;
    const input = el('input', { type: 'password', autocomplete: 'off', placeholder: 'the console token',
      testid: 'token-input' });
    const form = el('form', { class: 'signin', testid: 'sign-in' },
      el('p', {}, 'This console needs its token: open the address sbx serve printed ' +
        '(…/console/#token=…), or paste the token here.'), input, el('button', { type: 'submit' }, 'Sign in'));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!/^[A-Za-z0-9._~-]+$/.test(input.value)) return;
      sessionStorage.setItem(TOKEN_KEY, input.value);
      location.reload();
    });
    document.body.replaceChildren(form);
  }

  function streamUrl(method, params) {
    return 'api/stream?method=' + encodeURIComponent(method) + '&params=' + encodeURIComponent(JSON.stringify(params));
  }

  // Server-sent events read from a fetch (EventSource cannot send the bearer): calls
  // onEvent(name, data) per event; resolves when the stream ends, rejects when it breaks.
  async function readEvents(url, signal, onEvent) {
    const res = await fetch(url, { headers: authHeaders(), credentials: 'omit', signal });
    if (res.status === 401) showSignIn();
    if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let name = 'message', data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) name = line.slice(7);
          else if (line.startsWith('data: ')) data += line.slice(6);
        }
        onEvent(name, data);
      }
    }
  }

  // One process's output from `cursor` on: process.stream as server-sent events, and if the stream
  // cannot be had at all, process.logs polled once a second. Calls onOutput(stream, data,
  // encoding), onExit(info); returns a function that stops it.
  function followProcess(sandboxId, processId, cursor, handlers) {
    let es = null;
    let stopped = false;
    let pollTimer = null;
    let gotEvent = false;
    let ended = false;

    const finish = () => { ended = true; stop(); };
    const stop = () => {
      stopped = true;
      if (es) { es.abort(); es = null; }
      if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    };

    function open() {
      gotEvent = false;
      es = new AbortController();
      let over = false;
      readEvents(streamUrl('process.stream', { sandboxId, processId, cursor }), es.signal, (name, data) => {
        const d = parse(data);
        if (name === 'process.output') {
          gotEvent = true;
          if (!d) return;
          if (typeof d.dropped === 'number' && d.dropped > 0 && handlers.onDropped) handlers.onDropped(d.dropped);
          handlers.onOutput(d.stream === 'stderr' ? 'stderr' : 'stdout', String(d.data ?? ''), d.dataEncoding);
          if (typeof d.cursor === 'number') cursor = d.cursor;
        } else if (name === 'process.exit') {
          gotEvent = true;
          if (d && handlers.onExit) handlers.onExit(d);
        } else if (name === 'result') {
          over = true;
          if (d && typeof d.cursor === 'number') cursor = d.cursor;
          if (handlers.onEnd) handlers.onEnd(d);
          finish();
        } else if (name === 'error') {
          over = true;
          if (handlers.onError) handlers.onError((d && d.message) || 'stream error');
          finish();
        }
      }).catch(() => { /* reported below: the stream broke */ }).finally(() => {
        if (stopped || over) return;
        es = null;
        // A stream that worked and broke is opened again where it stopped; one refused from the
        // start (no events at all) gives way to polling.
        if (gotEvent) setTimeout(() => { if (!stopped) open(); }, 1000);
        else poll();
      });
    }

    async function poll() {
      if (stopped) return;
      try {
        const r = await rpc('process.logs', { sandboxId, processId, cursor });
        if (stopped) return;
        if (r.stdout) handlers.onOutput('stdout', r.stdout, r.stdoutEncoding);
        if (r.stderr) handlers.onOutput('stderr', r.stderr, r.stderrEncoding);
        if (typeof r.dropped === 'number' && r.dropped > 0 && handlers.onDropped) handlers.onDropped(r.dropped);
        if (typeof r.cursor === 'number') cursor = r.cursor;
        if (r.eof) {
          if (handlers.onExit) {
            try {
              const list = await rpc('process.list', { sandboxId });
              const p = (list.processes || []).find((x) => x.processId === processId);
              if (p) handlers.onExit(p);
            } catch (e) { /* the exit line is only a courtesy */ }
          }
          finish();
          return;
        }
      } catch (e) {
        if (handlers.onError) handlers.onError(e.message);
        finish();
        return;
      }
      pollTimer = setTimeout(poll, 1000);
    }

    open();
    return stop;
  }

  function parse(text) {
    try { return JSON.parse(text); } catch (e) { return null; }
  }

  function b64ToBytes(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function bytesToB64(bytes) {
    let bin = '';
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(bin);
  }

  // ---------------------------------------------------------------- status line and health

  let statusTimer = null;

  function status(msg, kind) {
    setText(statusLine, msg ? new Date().toLocaleTimeString() + '  ' + msg : '');
    statusLine.className = 'status-line' + (msg ? ' ' + (kind || 'error') : '');
    clearTimeout(statusTimer);
    if (msg && kind === 'info') statusTimer = setTimeout(() => status(''), 8000);
  }

  function reportError(e) {
    status(e && e.message ? e.message : String(e), 'error');
  }

  async function refreshHealth() {
    try {
      const h = await rpc('health');
      const parts = [
        ['up', fmtAge(h.uptimeMs)],
        ['sandboxes', h.sandboxes],
        ['processes', h.processes],
        ['sessions', h.sessions],
        ['runs', h.running],
      ];
      if (h.mode && h.mode !== 'namespaces') parts.push(['mode', h.mode]);
      if (h.shuttingDown) parts.push(['', 'shutting down']);
      healthStrip.replaceChildren(...parts.filter(([, v]) => v !== undefined).map(([k, v]) =>
        el('span', { class: 'stat' }, k ? el('span', { class: 'k' }, k + ' ') : null, el('b', {}, String(v)))));
      healthStrip.classList.remove('down');
    } catch (e) {
      healthStrip.replaceChildren(el('span', { class: 'stat' }, 'daemon: ' + e.message));
      healthStrip.classList.add('down');
    }
  }

  // ---------------------------------------------------------------- views and routing

  // A view's timers, streams and terminal end with it.
  class ViewScope {
    constructor() { this.alive = true; this.cleanups = []; }
    onDispose(fn) { this.cleanups.push(fn); }
    dispose() {
      this.alive = false;
      for (const fn of this.cleanups.splice(0)) { try { fn(); } catch (e) { /* already gone */ } }
    }
    // fn runs now and then `ms` after each run ends, while the view lives.
    every(ms, fn) {
      let t = null;
      const tick = async () => {
        if (!this.alive) return;
        try { await fn(); } catch (e) { if (this.alive) reportError(e); }
        if (this.alive) t = setTimeout(tick, ms);
      };
      this.onDispose(() => clearTimeout(t));
      tick();
    }
  }

  let scope = null;

  function route() {
    if (scope) scope.dispose();
    scope = new ViewScope();
    const hash = location.hash || '#/';
    let m;
    view.replaceChildren();
    for (const a of document.querySelectorAll('nav a')) a.classList.remove('active');
    if ((m = /^#\/sandbox\/([^/?#]+)$/.exec(hash))) {
      let id;
      try { id = decodeURIComponent(m[1]); } catch (e) { id = ''; }
      detailView(scope, id);
    } else if (hash === '#/audit') {
      document.querySelector('nav a[data-nav="audit"]').classList.add('active');
      auditView(scope);
    } else {
      document.querySelector('nav a[data-nav="list"]').classList.add('active');
      listView(scope);
    }
  }

  // ---------------------------------------------------------------- sparklines

  // A line of values scaled to [0, max] as an inline SVG; title says the latest value.
  function sparkline(testid, w, h) {
    const node = svg('svg', { 'data-testid': testid, class: 'spark', viewBox: `0 0 ${w} ${h}`, width: w, height: h,
      preserveAspectRatio: 'none', role: 'img' });
    const area = svg('polygon', { class: 'area', points: '' });
    const line = svg('polyline', { class: 'line', points: '' });
    const title = svg('title', {});
    node.append(title, area, line);
    node.update = (values, max, label) => {
      const vals = values.filter((v) => typeof v === 'number' && isFinite(v));
      setText(title, label || '');
      node.setAttribute('aria-label', label || '');
      node.dataset.points = String(vals.length);
      if (!vals.length) { line.setAttribute('points', ''); area.setAttribute('points', ''); return; }
      const top = Math.max(max || 0, ...vals) || 1;
      const step = vals.length > 1 ? w / (vals.length - 1) : 0;
      const pts = vals.map((v, i) => `${(i * step).toFixed(1)},${(h - 1 - (v / top) * (h - 2)).toFixed(1)}`);
      if (vals.length === 1) pts.push(`${w},${pts[0].split(',')[1]}`);
      line.setAttribute('points', pts.join(' '));
      area.setAttribute('points', `0,${h} ${pts.join(' ')} ${w},${h}`);
    };
    return node;
  }

  function metricSeries(m) {
    const samples = Array.isArray(m.samples) ? m.samples.slice() : [];
    if (m.current && typeof m.current === 'object') samples.push(m.current);
    return samples;
  }

  function drawMetrics(m, cpu, mem) {
    const s = metricSeries(m);
    const cur = m.current || s[s.length - 1] || {};
    // Scaled to what was used (a tenth of the top above it), not to the limits: an idle
    // sandbox's line would lie flat on the floor of its 512 MiB.
    const top = (vals, floor) => Math.max(floor, ...vals.filter((v) => typeof v === 'number' && isFinite(v))) * 1.1;
    const cpuVals = s.map((x) => x.cpuUsedPct), memVals = s.map((x) => x.memoryBytes);
    cpu.update(cpuVals, Math.min(100, top(cpuVals, 5)), 'CPU ' + fmtPct(cur.cpuUsedPct));
    mem.update(memVals, top(memVals, 1 << 20),
      'memory ' + fmtBytes(cur.memoryBytes) + (m.memoryLimitBytes ? ' of ' + fmtBytes(m.memoryLimitBytes) : ''));
  }

  // ---------------------------------------------------------------- #/  the sandbox list

  function listView(vs) {
    const { table: t, tbody } = table('sandbox-list',
      ['Sandbox', 'Label', 'Metadata', 'Created', 'State', 'CPU', 'Memory', 'Fork of']);
    const count = el('span', { class: 'muted' });
    view.append(el('section', { class: 'panel' }, el('h2', {}, 'Sandboxes ', count), t));
    const metrics = new Map();  // sandboxId -> last metrics
    let listed = [];

    function render() {
      syncRows(tbody, listed, (s) => s.sandboxId, createRow, updateRow);
      emptyRow(tbody, 8, 'No sandboxes.');
      setText(count, '(' + listed.length + ')');
    }

    function createRow(s) {
      const tr = el('tr', { testid: 'sandbox-row', 'data-id': s.sandboxId, class: 'clickable', tabindex: 0 });
      const cpu = sparkline('cpu-spark', 90, 22);
      const mem = sparkline('mem-spark', 90, 22);
      tr.cells_ = {
        id: el('td', { class: 'mono' }, sandboxLink(s.sandboxId)),
        label: el('td', { testid: 'sandbox-label' }),
        meta: el('td', { testid: 'sandbox-metadata', class: 'meta' }),
        created: el('td', { testid: 'sandbox-created' }),
        state: el('td', { testid: 'sandbox-state' }),
        cpu: el('td', { class: 'spark-cell' }, cpu, el('span', { class: 'spark-val' })),
        mem: el('td', { class: 'spark-cell' }, mem, el('span', { class: 'spark-val' })),
        forkOf: el('td', { testid: 'fork-of' }),
      };
      tr.spark_ = { cpu, mem };
      tr.append(...Object.values(tr.cells_));
      const go = () => { location.hash = '#/sandbox/' + encodeURIComponent(s.sandboxId); };
      tr.addEventListener('click', (e) => { if (!e.target.closest('a')) go(); });
      tr.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(); });
      return tr;
    }

    function updateRow(tr, s) {
      const c = tr.cells_;
      setText(c.label, typeof s.label === 'string' ? s.label : '');
      const metaKey = JSON.stringify(s.metadata || {});
      if (c.meta.dataset.v !== metaKey) {
        c.meta.dataset.v = metaKey;
        c.meta.replaceChildren(...Object.entries(s.metadata || {}).map(([k, v]) =>
          el('span', { class: 'kv' }, el('span', { class: 'k' }, k), '=', el('span', { class: 'v' }, String(v)))));
      }
      setText(c.created, fmtAge(Date.now() - toMs(s.createdAt)) + ' ago');
      c.created.setAttribute('title', fmtTime(toMs(s.createdAt)));
      const paused = !!s.paused;
      if (c.state.dataset.paused !== String(paused)) {
        c.state.dataset.paused = String(paused);
        c.state.replaceChildren(paused ? el('span', { testid: 'paused-badge', class: 'badge paused' }, 'paused')
          : el('span', { class: 'badge running' }, 'running'));
      }
      const fork = s.forkOf || '';
      if (c.forkOf.dataset.id !== fork) {
        c.forkOf.dataset.id = fork;
        c.forkOf.replaceChildren(fork ? sandboxLink(fork) : '');
      }
      const m = metrics.get(s.sandboxId);
      if (m) {
        drawMetrics(m, tr.spark_.cpu, tr.spark_.mem);
        const cur = m.current || {};
        setText(c.cpu.lastChild, fmtPct(cur.cpuUsedPct));
        setText(c.mem.lastChild, fmtBytes(cur.memoryBytes));
      }
    }

    async function refreshList() {
      const r = await rpc('sandbox.list');
      if (!vs.alive) return;
      listed = (r.sandboxes || []).slice().sort((a, b) => (toMs(a.createdAt) - toMs(b.createdAt)) ||
        String(a.sandboxId).localeCompare(String(b.sandboxId)));
      for (const id of metrics.keys()) if (!listed.some((s) => s.sandboxId === id)) metrics.delete(id);
      render();
    }

    // The last ten minutes are enough for a row's sparkline; the detail page shows the hour.
    async function refreshMetrics() {
      const start = Date.now() - 10 * 60 * 1000;
      await Promise.all(listed.slice(0, 200).map(async (s) => {
        try {
          const m = await rpc('sandbox.metrics', { sandboxId: s.sandboxId, start });
          metrics.set(s.sandboxId, m);
        } catch (e) {
          if (!/Unknown sandboxId/.test(e.message)) throw e;  // destroyed meanwhile: the list will drop it
        }
      }));
      if (vs.alive) render();
    }

    // New sandboxes show within a second; sparklines follow every two.
    vs.every(1000, refreshList);
    vs.every(2000, refreshMetrics);
  }

  // ---------------------------------------------------------------- #/sandbox/ID  one sandbox

  function detailView(vs, id) {
    const title = el('span', { class: 'mono' }, id);
    const labelEl = el('span', { class: 'label', testid: 'detail-label' });
    const badge = el('span', { class: 'badges' });
    const info = el('dl', { class: 'facts', testid: 'sandbox-info' });
    const confirmBox = el('div', { class: 'confirm', hidden: true });
    const actPause = button('Pause', { testid: 'action-pause' }, () => act('sandbox.pause', 'paused'));
    const actResume = button('Resume', { testid: 'action-resume' }, () => act('sandbox.resume', 'resumed'));
    const actFork = button('Fork', { testid: 'action-fork' }, fork);
    const actDestroy = button('Destroy…', { testid: 'action-destroy', class: 'danger' }, askDestroy);
    const cpuChart = sparkline('cpu-chart', 480, 80);
    const memChart = sparkline('mem-chart', 480, 80);
    const cpuNow = el('div', { class: 'chart-val' });
    const memNow = el('div', { class: 'chart-val' });
    const usage = el('dl', { class: 'facts', testid: 'usage' });
    const sessions = table('sessions', ['Session', 'Running', 'Since', 'Queued']);
    const procs = table('processes', ['Id', 'PID', 'Command', 'Label', 'Status', 'Exit', 'Started', '']);
    const ports = table('ports', ['Port', 'On the host', 'Owner uid', 'Refused']);
    const forkTree = el('div', { testid: 'fork-tree', class: 'fork-tree' });
    const logPanel = el('section', { class: 'panel', testid: 'log-panel', hidden: true });
    const termPanel = el('section', { class: 'panel', testid: 'terminal-panel' });
    const filesPanel = el('section', { class: 'panel', testid: 'files' });
    const detail = el('div', { testid: 'sandbox-detail', 'data-id': id },
      el('section', { class: 'panel head' },
        el('h2', {}, 'Sandbox ', title, ' ', labelEl, ' ', badge),
        info,
        el('div', { class: 'actions' }, actPause, actResume, actFork, actDestroy),
        confirmBox),
      el('section', { class: 'panel' }, el('h3', {}, 'Usage (last hour)'),
        el('div', { class: 'charts' },
          el('figure', {}, el('figcaption', {}, 'CPU'), cpuChart, cpuNow),
          el('figure', {}, el('figcaption', {}, 'Memory'), memChart, memNow)),
        usage),
      el('div', { class: 'cols' },
        el('section', { class: 'panel' }, el('h3', {}, 'Sessions'), sessions.table),
        el('section', { class: 'panel' }, el('h3', {}, 'Fork tree'), forkTree),
        el('section', { class: 'panel' }, el('h3', {}, 'Ports'), ports.table)),
      el('section', { class: 'panel' }, el('h3', {}, 'Processes'), procs.table),
      logPanel,
      termPanel,
      filesPanel);
    view.append(detail);

    let me = null;       // this sandbox as sandbox.list has it
    let gone = false;

    let busy = false;
    function setBusy(b) {
      busy = b;
      const off = busy || gone || !me;
      actPause.disabled = off || !!me.paused;
      actResume.disabled = off || !me.paused;
      actFork.disabled = off;
      actDestroy.disabled = off;
    }

    async function act(method, done) {
      setBusy(true);
      try {
        await rpc(method, { sandboxId: id });
        status('Sandbox ' + shortId(id) + ' ' + done + '.', 'info');
        await refreshInfo();
      } catch (e) { reportError(e); } finally { setBusy(false); }
    }

    async function fork() {
      setBusy(true);
      try {
        const r = await rpc('sandbox.fork', { sandboxId: id });
        status('Forked: new sandbox ' + shortId(r.sandboxId) + '.', 'info');
        await refreshInfo();
      } catch (e) { reportError(e); } finally { setBusy(false); }
    }

    function askDestroy() {
      confirmBox.replaceChildren(
        el('span', {}, 'Destroy sandbox ', el('b', { class: 'mono' }, shortId(id)),
          '? Every process in it is killed and its files are gone.'),
        button('Destroy', { testid: 'confirm-yes', class: 'danger' }, destroy),
        button('Cancel', { testid: 'confirm-no' }, () => { confirmBox.hidden = true; confirmBox.replaceChildren(); }));
      confirmBox.hidden = false;
      confirmBox.querySelector('[data-testid="confirm-no"]').focus();
    }

    async function destroy() {
      confirmBox.hidden = true;
      setBusy(true);
      try {
        await rpc('sandbox.destroy', { sandboxId: id });
        status('Sandbox ' + shortId(id) + ' destroyed.', 'info');
        location.hash = '#/';
      } catch (e) { reportError(e); setBusy(false); }
    }

    async function refreshInfo() {
      const r = await rpc('sandbox.list');
      if (!vs.alive) return;
      const all = r.sandboxes || [];
      me = all.find((s) => s.sandboxId === id) || null;
      if (!me) {
        gone = true;
        setBusy(true);
        status('Sandbox ' + id + ' does not exist (any more).', 'error');
        vs.dispose();
        return;
      }
      setText(labelEl, typeof me.label === 'string' ? me.label : '');
      badge.replaceChildren(me.paused ? el('span', { testid: 'paused-badge', class: 'badge paused' }, 'paused')
        : el('span', { class: 'badge running' }, 'running'));
      setBusy(busy);
      const facts = [['created', fmtTime(toMs(me.createdAt)) + ' (' + fmtAge(Date.now() - toMs(me.createdAt)) + ' ago)'],
        ['persist', me.persist ? 'yes' : 'no'], ['root sandbox of its connection', me.root ? 'yes' : 'no']];
      if (me.ip) facts.push(['ip', me.ip]);
      const meta = Object.entries(me.metadata || {});
      info.replaceChildren(...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]),
        ...(meta.length ? [el('dt', {}, 'metadata'), el('dd', { testid: 'detail-metadata' },
          meta.map(([k, v]) => el('span', { class: 'kv' }, el('span', { class: 'k' }, k), '=', el('span', { class: 'v' }, String(v)))))] : []));
      renderForkTree(all);
    }

    function renderForkTree(all) {
      const parentId = me.forkOf || null;
      const children = all.filter((s) => s.forkOf === id);
      const parentEntry = parentId ? all.find((s) => s.sandboxId === parentId) : null;
      forkTree.replaceChildren(
        el('div', {}, el('span', { class: 'k' }, 'parent: '),
          parentId ? (parentEntry ? sandboxLink(parentId, { testid: 'fork-parent' })
            : el('span', { testid: 'fork-parent', 'data-id': parentId, class: 'mono muted' }, shortId(parentId) + ' (gone)'))
            : el('span', { class: 'muted' }, 'none')),
        el('div', {}, el('span', { class: 'k' }, 'children: '),
          children.length ? el('ul', {}, children.map((c) => el('li', {}, sandboxLink(c.sandboxId, { testid: 'fork-child' }),
            c.label ? el('span', { class: 'muted' }, ' ' + c.label) : null)))
            : el('span', { class: 'muted' }, 'none')));
    }

    async function refreshMetrics() {
      const m = await rpc('sandbox.metrics', { sandboxId: id });
      if (!vs.alive) return;
      drawMetrics(m, cpuChart, memChart);
      const cur = m.current || {};
      setText(cpuNow, fmtPct(cur.cpuUsedPct) + (m.cpuCount ? ' of ' + m.cpuCount + ' CPU' + (m.cpuCount === 1 ? '' : 's') : ''));
      setText(memNow, fmtBytes(cur.memoryBytes) + (m.memoryLimitBytes ? ' of ' + fmtBytes(m.memoryLimitBytes) : ''));
      const facts = [['tasks', cur.pids], ['runs', cur.runs],
        ['files', fmtBytes(cur.fsBytes) + (m.fsLimitBytes ? ' of ' + fmtBytes(m.fsLimitBytes) : '')],
        ['inodes', (cur.fsFiles ?? '–') + (m.fileLimit ? ' of ' + m.fileLimit : '')],
        ['network', fmtBytes(cur.netBytes)]];
      usage.replaceChildren(...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v ?? '–'))]));
    }

    async function refreshSessions() {
      const r = await rpc('session.list', { sandboxId: id });
      if (!vs.alive) return;
      syncRows(sessions.tbody, r.sessions || [], (s) => s.name, (s) => el('tr', { testid: 'session-row', 'data-name': s.name },
        el('td', { class: 'mono' }), el('td', { class: 'mono cmd', testid: 'session-running' }), el('td', {}), el('td', {})),
      (tr, s) => {
        const run = s.running && typeof s.running === 'object' ? s.running : null;
        setText(tr.cells[0], String(s.name));
        setText(tr.cells[1], run ? String(run.command ?? '') : 'idle');
        tr.cells[1].classList.toggle('muted', !run);
        setText(tr.cells[2], run ? fmtAge(run.runningMs) : '');
        setText(tr.cells[3], String(s.queued ?? 0));
      });
      emptyRow(sessions.tbody, 4, 'No sessions.');
    }

    async function refreshProcesses() {
      const r = await rpc('process.list', { sandboxId: id });
      if (!vs.alive) return;
      const list = (r.processes || []).slice().reverse();  // newest first
      syncRows(procs.tbody, list, (p) => p.processId, createProcRow, updateProcRow);
      emptyRow(procs.tbody, 8, 'No processes.');
    }

    function createProcRow(p) {
      const tr = el('tr', { testid: 'process-row', 'data-id': p.processId });
      const kill = button('Kill', { testid: 'action-kill', class: 'danger small' }, async () => {
        kill.disabled = true;
        try {
          const r = await rpc('process.kill', { sandboxId: id, processId: p.processId });
          status('Process ' + p.processId + ' ' + (r && r.status ? r.status : 'killed') + '.', 'info');
        } catch (e) { reportError(e); }
        await refreshProcesses().catch(reportError);
      });
      const viewLog = button('Log', { testid: 'view-log', class: 'small' }, () => openLog(p.processId, p.command));
      tr.append(el('td', { class: 'mono' }, p.processId), el('td', {}), el('td', { class: 'mono cmd' }), el('td', {}),
        el('td', { testid: 'process-status' }), el('td', {}), el('td', {}), el('td', { class: 'btns' }, viewLog, kill));
      tr.kill_ = kill;
      return tr;
    }

    function updateProcRow(tr, p) {
      const c = tr.cells;
      setText(c[1], String(p.pid ?? ''));
      setText(c[2], String(p.command ?? ''));
      setText(c[3], String(p.label ?? '') + (p.pty ? ' [pty]' : '') + (p.origin === 'leftover' ? ' [leftover]' : ''));
      const st = String(p.status ?? '') + (p.status !== 'running' && p.alive ? ' (still alive)' : '');
      setText(c[4], st);
      c[4].className = 'st-' + String(p.status).replace(/[^a-z]/g, '');
      c[4].dataset.alive = p.alive ? '1' : '0';
      setText(c[5], p.exitCode === null || p.exitCode === undefined ? '' : String(p.exitCode) + (p.signal ? ' (' + p.signal + ')' : ''));
      setText(c[6], fmtTime(p.startedAt));
      if (!p.alive) { tr.kill_.hidden = true; } else if (tr.kill_.hidden) { tr.kill_.hidden = false; tr.kill_.disabled = false; }
    }

    async function refreshPorts() {
      const r = await rpc('port.list', { sandboxId: id });
      if (!vs.alive) return;
      syncRows(ports.tbody, r.ports || [], (p) => p.port, (p) => el('tr', { testid: 'port-row', 'data-port': p.port },
        el('td', {}), el('td', {}), el('td', {}), el('td', {})), (tr, p) => {
        setText(tr.cells[0], String(p.port));
        const url = 'http://' + p.host + ':' + p.hostPort + '/';
        // Text, never a link: what answers there is the sandbox's, and a page of it opened by the
        // operator's browser is one more page on this host to trust.
        setText(tr.cells[1], url);
        setText(tr.cells[2], String(p.ownerUid ?? ''));
        setText(tr.cells[3], String(p.refused ?? 0));
      });
      emptyRow(ports.tbody, 4, 'No exposed ports.');
    }

    // ---- the log viewer

    let stopLog = null;
    vs.onDispose(() => { if (stopLog) stopLog(); });

    function openLog(processId, command) {
      if (stopLog) stopLog();
      const pre = el('pre', { testid: 'process-log', class: 'log', 'data-id': processId });
      const state = el('div', { testid: 'log-state', class: 'muted' }, 'following…');
      const close = button('Close', { testid: 'log-close', class: 'small' }, () => {
        if (stopLog) stopLog();
        stopLog = null;
        logPanel.hidden = true;
        logPanel.replaceChildren();
      });
      logPanel.replaceChildren(el('h3', {}, 'Log of ', el('span', { class: 'mono' }, processId), ' ',
        el('span', { class: 'mono muted cmd' }, String(command ?? '')), ' ', close), state, pre);
      logPanel.hidden = false;
      const decoders = { stdout: new TextDecoder('utf-8'), stderr: new TextDecoder('utf-8') };
      let chars = 0;
      stopLog = followProcess(id, processId, 0, {
        onOutput(stream, data, encoding) {
          const text = encoding === 'base64' ? decoders[stream].decode(b64ToBytes(data), { stream: true }) : data;
          if (!text) return;
          const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          const last = pre.lastChild;
          if (last && last.dataset.stream === stream) last.firstChild.appendData(text);
          else pre.appendChild(el('span', { class: stream, 'data-stream': stream }, text));
          chars += text.length;
          while (chars > LOG_KEEP_CHARS && pre.firstChild && pre.firstChild !== pre.lastChild) {
            chars -= pre.firstChild.textContent.length;
            pre.firstChild.remove();
          }
          if (atBottom) pre.scrollTop = pre.scrollHeight;
        },
        onDropped(n) { setText(state, 'following… (' + fmtBytes(n) + ' before this were dropped from the log)'); },
        onExit(x) {
          setText(state, 'ended: ' + String(x.status ?? '') + (x.exitCode !== null && x.exitCode !== undefined ? ', exit ' + x.exitCode : '') +
            (x.signal ? ', signal ' + x.signal : ''));
          state.dataset.ended = '1';
        },
        onError(msg) { setText(state, 'stream: ' + msg); },
      });
    }

    // ---- the terminal

    let term = null;
    vs.onDispose(() => { if (term) term.close(); });
    const termBox = el('div', { testid: 'terminal', class: 'terminal', hidden: true });
    const termState = el('span', { class: 'muted', testid: 'terminal-state' });
    const termOpen = button('Open terminal', { testid: 'terminal-open' }, () => {
      if (term) return;
      term = openTerminal(id, termBox, termState, () => {
        term = null;
        termOpen.disabled = false;
        termClose.disabled = true;
      }, () => { if (vs.alive) refreshProcesses().catch(reportError); });
      if (term) { termOpen.disabled = true; termClose.disabled = false; }
    });
    const termClose = button('Close terminal', { testid: 'terminal-close', disabled: true }, () => { if (term) term.close(); });
    termPanel.append(el('h3', {}, 'Terminal ', termOpen, ' ', termClose, ' ', termState), termBox);

    // ---- files

    const crumbs = el('nav', { testid: 'files-breadcrumb', class: 'crumbs' });
    const entries = table('file-list', ['Name', 'Type', 'Size', 'Mode', 'Modified']);
    const fileHead = el('div', { testid: 'file-head', class: 'muted' });
    const fileView = el('pre', { testid: 'file-view', class: 'file', hidden: true });
    let cwd = '/home/user';
    filesPanel.append(el('h3', {}, 'Files ', button('Refresh', { class: 'small', testid: 'files-refresh' }, () => listDir(cwd))),
      crumbs, entries.table, fileHead, fileView);

    async function listDir(path) {
      let r;
      try {
        r = await rpc('files.list', { sandboxId: id, path });
      } catch (e) { reportError(e); return; }
      if (!vs.alive) return;
      cwd = path;
      const parts = path.split('/').filter(Boolean);
      const crumbNodes = [button('/', { class: 'crumb', 'data-path': '/' }, () => listDir('/'))];
      parts.forEach((name, i) => {
        const p = '/' + parts.slice(0, i + 1).join('/');
        crumbNodes.push(el('span', { class: 'sep' }, i ? '/' : ''),
          button(name, { class: 'crumb', 'data-path': p }, () => listDir(p)));
      });
      crumbs.replaceChildren(...crumbNodes);
      const list = (r.entries || []).slice().sort((a, b) =>
        ((b.type === 'dir') - (a.type === 'dir')) || String(a.name).localeCompare(String(b.name)));
      entries.tbody.replaceChildren(...list.map((e) => {
        const full = typeof e.path === 'string' ? e.path : (path.replace(/\/$/, '') + '/' + e.name);
        let name;
        if (e.type === 'dir') name = button(String(e.name) + '/', { class: 'link', testid: 'file-open' }, () => listDir(full));
        else if (e.type === 'file') name = button(String(e.name), { class: 'link', testid: 'file-open' }, () => showFile(full));
        else name = el('span', {}, String(e.name), e.type === 'symlink' ? el('span', { class: 'muted' }, ' → ' + String(e.target ?? '')) : null);
        return el('tr', { testid: 'file-entry', 'data-name': e.name, 'data-type': e.type },
          el('td', { class: 'mono' }, name), el('td', {}, String(e.type ?? '')),
          el('td', {}, e.type === 'file' ? fmtBytes(e.size) : ''),
          el('td', { class: 'mono' }, typeof e.mode === 'number' ? e.mode.toString(8).padStart(4, '0') : ''),
          el('td', {}, fmtTime(toMs(e.mtime))));
      }));
      emptyRow(entries.tbody, 5, 'Empty directory.');
    }

    async function showFile(path) {
      let r;
      try {
        r = await rpc('files.read', { sandboxId: id, path, offset: 0, length: FILE_SHOW_BYTES });
      } catch (e) { reportError(e); return; }
      if (!vs.alive) return;
      const bytes = b64ToBytes(r.data || '');
      const shown = bytes.subarray(0, FILE_SHOW_BYTES);
      const binary = shown.includes(0);
      fileHead.replaceChildren(el('span', { class: 'mono' }, path), ' — ' + fmtBytes(r.size) +
        (r.size > shown.length ? ' (the first ' + fmtBytes(shown.length) + ' shown)' : '') + (binary ? ' (binary)' : ''));
      fileView.textContent = new TextDecoder('utf-8').decode(shown);
      fileView.hidden = false;
    }

    setBusy(false);
    listDir(cwd);
    vs.every(2000, refreshInfo);
    vs.every(2000, refreshMetrics);
    vs.every(2000, refreshSessions);
    vs.every(2000, refreshProcesses);
    vs.every(3000, refreshPorts);
  }

  // ---------------------------------------------------------------- the terminal

  // The page's CSP allows no inline <style> (even an empty one is refused), and xterm's DOM
  // renderer writes the CSS it computes (cell size, palette: from our options and the font, never
  // from the sandbox) into <style> elements it makes, fills through textContent and later
  // removes. It gets an inert <template> in their place whose textContent feeds a constructed
  // stylesheet, which CSP permits. The page itself never makes a <style>.
  const realCreateElement = document.createElement;
  document.createElement = function (tag, options) {
    if (String(tag).toLowerCase() !== 'style') return realCreateElement.call(this, tag, options);
    const node = realCreateElement.call(this, 'template');
    const sheet = new CSSStyleSheet();
    let css = '';
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    Object.defineProperty(node, 'textContent', {
      get: () => css,
      set: (v) => { css = String(v); sheet.replaceSync(css); },
    });
    node.remove = function () {
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
      return Element.prototype.remove.call(this);
    };
    return node;
  };

  const TERM_FONT = { family: 'DejaVu Sans Mono, Menlo, Consolas, monospace', size: 14 };

  // Columns and rows that fit the box, from the size of a character of the terminal's font.
  function fitSize(box) {
    const probe = el('span', { class: 'term-probe' }, 'W'.repeat(40));
    probe.style.fontFamily = TERM_FONT.family;
    probe.style.fontSize = TERM_FONT.size + 'px';
    box.appendChild(probe);
    const r = probe.getBoundingClientRect();
    probe.remove();
    const cw = r.width / 40 || 8;
    const ch = r.height || 17;
    const w = box.clientWidth - 16;   // xterm's scrollbar
    const h = box.clientHeight;
    return { cols: Math.max(20, Math.min(400, Math.floor(w / cw))), rows: Math.max(5, Math.min(200, Math.floor(h / ch))) };
  }

  // `exec bash -i` on a pty in the sandbox: output from its stream into xterm, keystrokes back
  // in batches through process.write. Returns {close} or null.
  function openTerminal(sandboxId, box, stateEl, onClosed, onKilled) {
    if (typeof window.Terminal !== 'function') {
      status('The terminal (vendor/xterm.js) did not load.', 'error');
      return null;
    }
    box.hidden = false;
    box.replaceChildren();
    const size = fitSize(box);
    // No title, link or OSC handler is wired: what the sandbox prints must not reach the page.
    // xterm's default link activation would open a confirm() dialog: links do nothing here.
    const term = new window.Terminal({
      cols: size.cols, rows: size.rows, fontFamily: TERM_FONT.family, fontSize: TERM_FONT.size,
      cursorBlink: true, scrollback: 5000, allowProposedApi: false,
      linkHandler: { activate() {}, allowNonHttpProtocols: false },
    });
    term.open(box);
    let processId = null;
    let closed = false;
    let stopStream = null;
    let pending = [];
    let sending = false;
    let flushTimer = null;
    const enc = new TextEncoder();
    setText(stateEl, 'starting…');

    function queue(bytes) {
      if (closed || !processId) return;
      pending.push(bytes);
      if (!flushTimer && !sending) flushTimer = setTimeout(flush, 8);
    }

    // Keystrokes go in order, one request at a time; what comes meanwhile is sent together.
    async function flush() {
      flushTimer = null;
      if (sending || !pending.length || closed) return;
      const n = pending.reduce((a, b) => a + b.length, 0);
      const all = new Uint8Array(n);
      let o = 0;
      for (const b of pending) { all.set(b, o); o += b.length; }
      pending = [];
      sending = true;
      try {
        await rpc('process.write', { sandboxId, processId, data: bytesToB64(all) });
      } catch (e) { if (!closed) reportError(e); }
      sending = false;
      if (pending.length) flush();
    }

    term.onData((s) => queue(enc.encode(s)));
    term.onBinary((s) => queue(Uint8Array.from(s, (c) => c.charCodeAt(0) & 255)));
    term.onResize(({ cols, rows }) => {
      if (!processId || closed) return;
      rpc('process.resize', { sandboxId, processId, cols, rows }).catch((e) => { if (!closed) reportError(e); });
    });
    let resizeTimer = null;
    const onWindowResize = () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        const s = fitSize(box);
        if (s.cols !== term.cols || s.rows !== term.rows) term.resize(s.cols, s.rows);
      }, 100);
    };
    window.addEventListener('resize', onWindowResize);

    rpc('process.start', { sandboxId, command: 'exec bash -i', pty: { cols: term.cols, rows: term.rows },
      env: { TERM: 'xterm-256color' }, label: 'console terminal' })
      .then((r) => {
        if (closed) {  // closed while starting: it must not be left running
          rpc('process.kill', { sandboxId, processId: r.processId, graceMs: 0 }).catch(() => {});
          return;
        }
        processId = r.processId;
        box.dataset.processId = processId;
        setText(stateEl, processId + ' (pid ' + r.pid + ')');
        stopStream = followProcess(sandboxId, processId, 0, {
          onOutput(stream, data, encoding) { term.write(encoding === 'base64' ? b64ToBytes(data) : data); },
          onExit(x) {
            setText(stateEl, processId + ' ended (' + String(x.status ?? '') + ')');
            term.write('\r\n[process ended]\r\n');
            processId = null;
          },
          onError(msg) { setText(stateEl, 'stream: ' + msg); },
        });
        term.focus();
      })
      .catch((e) => { reportError(e); close(); });

    function close() {
      if (closed) return;
      closed = true;
      window.removeEventListener('resize', onWindowResize);
      clearTimeout(flushTimer);
      clearTimeout(resizeTimer);
      killOnUnload.delete(closeHandle);
      if (stopStream) stopStream();
      if (processId) {
        const pid = processId;
        rpc('process.kill', { sandboxId, processId: pid, graceMs: 0 })
          .then(() => { status('Terminal ' + pid + ' closed.', 'info'); onKilled(); })
          .catch((e) => { if (!/Unknown|ended|not found/i.test(e.message)) reportError(e); });
      }
      term.dispose();
      box.replaceChildren();
      box.hidden = true;
      setText(stateEl, '');
      onClosed();
    }
    const closeHandle = { sandboxId, get processId() { return processId; } };
    killOnUnload.add(closeHandle);
    return { close };
  }

  // A terminal whose page goes away is killed too: keepalive lets the request outlive the page.
  const killOnUnload = new Set();
  window.addEventListener('pagehide', () => {
    for (const t of killOnUnload) {
      if (!t.processId) continue;
      fetch('api/rpc', {
        method: 'POST', keepalive: true, credentials: 'omit',
        headers: authHeaders({ 'Content-Type': 'application/json', 'X-Sbx-Console': '1' }),
        body: JSON.stringify({ method: 'process.kill', params: { sandboxId: t.sandboxId, processId: t.processId, graceMs: 0 } }),
      }).catch(() => {});
    }
  });

  // ---------------------------------------------------------------- #/audit

  function auditView(vs) {
    const healthEl = el('div', { testid: 'audit-health', class: 'facts-line' });
    const chain = el('div', { testid: 'audit-chain', class: 'chain' }, 'not verified yet');
    const verify = button('Verify the chain', { testid: 'audit-verify' }, async () => {
      verify.disabled = true;
      setText(chain, 'verifying…');
      chain.className = 'chain';
      try {
        const r = await rpc('audit.verify');
        if (!r.enabled) setText(chain, 'The audit log is off.');
        else setText(chain, (r.ok ? 'chain ok' : 'chain BROKEN') + ': ' + (r.lines ?? '?') + ' lines' +
          (r.message ? ' — ' + String(r.message) : ''));
        chain.className = 'chain ' + (r.enabled ? (r.ok ? 'ok' : 'bad') : '');
        chain.dataset.ok = r.ok ? '1' : '0';
      } catch (e) { setText(chain, e.message); chain.className = 'chain bad'; }
      verify.disabled = false;
    });
    const filter = el('input', { type: 'search', placeholder: 'filter (text in the event)', testid: 'audit-filter' });
    const list = el('ol', { testid: 'audit-events', class: 'events', reversed: true });
    const shown = el('span', { class: 'muted' });
    view.append(el('section', { testid: 'audit', class: 'panel' },
      el('h2', {}, 'Audit trail'), healthEl,
      el('div', { class: 'actions' }, verify, chain),
      el('div', { class: 'actions' }, filter, shown),
      list));
    let events = [];
    let lastKey = '';

    function render() {
      const q = filter.value.trim().toLowerCase();
      const lines = events.map((e) => JSON.stringify(e)).reverse();  // newest first
      const pick = q ? lines.filter((l) => l.toLowerCase().includes(q)) : lines;
      const key = q + '\n' + pick.length + '\n' + (pick[0] || '');
      if (key === lastKey) return;
      lastKey = key;
      list.replaceChildren(...pick.map((l) => {
        const ev = parse(l) || {};
        return el('li', { testid: 'audit-event', 'data-type': String(ev.type ?? '') }, el('code', {}, l));
      }));
      setText(shown, pick.length + ' of ' + events.length + ' recent events, newest first');
    }
    filter.addEventListener('input', render);

    vs.every(3000, async () => {
      const r = await rpc('audit.recent', { limit: 200 });
      if (!vs.alive) return;
      const h = r.health || {};
      if (!r.enabled) {
        healthEl.replaceChildren('The audit log is off: start sbx serve with --audit PATH.');
      } else {
        const parts = [['file', h.path], ['writer', h.writerAlive === undefined ? undefined : (h.writerAlive ? 'alive' : 'GONE')],
          ['events', h.events], ['written', h.written], ['dropped', h.dropped], ['failed', h.failed],
          ['failing', h.failing === undefined ? undefined : (h.failing ? 'YES' : 'no')]];
        healthEl.replaceChildren(...parts.filter(([, v]) => v !== undefined && v !== null).map(([k, v]) =>
          el('span', { class: 'stat' }, el('span', { class: 'k' }, k + ' '), el('b', {}, String(v)))));
        healthEl.classList.toggle('bad', !!(h.failing || h.dropped || h.failed || h.writerAlive === false));
      }
      events = Array.isArray(r.events) ? r.events : [];
      render();
    });
  }

  // ---------------------------------------------------------------- start

  if (!token()) {
    showSignIn();
  } else {
    window.addEventListener('hashchange', route);
    route();
    refreshHealth();
    setInterval(refreshHealth, 3000);
  }
})();
