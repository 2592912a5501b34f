// Opens memsnap's HTML report in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) and checks it like a reader would: no console errors and no network, every chart
// drew, the numbers on the page are the JSON report's, and a screenshot is kept per page.
//
//   node tests/browser/report_test.mjs --memsnap build/src/memsnap --artifacts build/tests/artifacts SNAPSHOT...
//
// Environment: MEMSNAP_CHROMIUM (default /usr/bin/chromium), MEMSNAP_LOAD_LIMIT_MS (default 2000):
// the most a page may take from navigation start to fully drawn.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';

const args = process.argv.slice(2);
const opt = { memsnap: null, artifacts: null, snapshots: [] };
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--memsnap') opt.memsnap = args[++i];
  else if (args[i] === '--artifacts') opt.artifacts = args[++i];
  else opt.snapshots.push(args[i]);
}
if (!opt.memsnap || !opt.artifacts || !opt.snapshots.length) {
  console.error('usage: node report_test.mjs --memsnap BIN --artifacts DIR SNAPSHOT...');
  process.exit(2);
}
const executablePath = process.env.MEMSNAP_CHROMIUM || '/usr/bin/chromium';
const loadLimitMs = Number(process.env.MEMSNAP_LOAD_LIMIT_MS || 2000);
if (!fs.existsSync(executablePath)) {
  console.error(`${executablePath} is missing: install Debian's chromium package (scripts/install-deps.sh does it)`);
  process.exit(1);
}
fs.mkdirSync(opt.artifacts, { recursive: true });

let passed = 0;
let failed = 0;
function check(ok, what) {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} - ${what}`);
  return ok;
}

// The page's own formatting, written again here from the text report's rules (binary units).
function fmtBytes(b) {
  if (b === null || b === undefined) return '\u2014';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = Math.abs(b);
  let u = 0;
  while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
  const sign = b < 0 ? '-' : '';
  return u === 0 ? `${sign}${Math.trunc(v)} B` : `${sign}${v.toFixed(2)} ${units[u]}`;
}
const fmtCount = (n) => (n === null || n === undefined ? '\u2014' : Number(n).toLocaleString('en-US'));
const FORMATS = {
  bytes: fmtBytes,
  signed_bytes: (b) => (b > 0 ? '+' : '') + fmtBytes(b),
  count: fmtCount,
  signed_count: (n) => (n > 0 ? '+' : '') + fmtCount(n),
  percent: (p) => (p === null || p === undefined ? '\u2014' : `${Number(p).toFixed(2)} %`),
  text: (v) => (v === null || v === undefined ? '\u2014' : String(v)),
};
function lookup(obj, key) {
  return key.split('.').reduce((o, k) => (o === null || o === undefined ? undefined : o[k]), obj);
}
const deepEqual = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const max = (xs) => xs.reduce((m, x) => Math.max(m, x), -Infinity);

// Replaces the page's inlined data (as memsnap writes it: every '<' escaped).
function withData(html, data) {
  const open = '<script id="memsnap-data" type="application/json">';
  const start = html.indexOf(open) + open.length;
  const end = html.indexOf('</script>', start);
  return html.slice(0, start) + JSON.stringify(data).replace(/</g, '\\u003c') + html.slice(end);
}

// Optional sections keyed as docs/report-schema.md's `diff` and `ranks` (the report contract).
function addDiffAndRanks(report) {
  const sites = report.top_sites.map((s, i) => {
    const before = i % 3 === 0 ? 0 : Math.floor(s.bytes / (i + 1));
    const delta = s.bytes - before;
    return { site: s.site, bytes_before: before, bytes_after: s.bytes, delta_bytes: delta, blocks_before: i % 3 === 0 ? 0 : 1,
             blocks_after: s.blocks, delta_blocks: s.blocks - (i % 3 === 0 ? 0 : 1),
             status: before === 0 ? 'new' : delta > 0 ? 'grown' : delta < 0 ? 'shrunk' : 'same' };
  });
  sites.push({ site: '/home/user/project/cache.py:12', bytes_before: 1 << 30, bytes_after: 0, delta_bytes: -(1 << 30),
               blocks_before: 4, blocks_after: 0, delta_blocks: -4, status: 'removed' });
  sites.sort((a, b) => b.delta_bytes - a.delta_bytes);
  const totalsDelta = {};
  for (const k of ['reserved', 'allocated', 'pending_free', 'inactive', 'requested', 'segments', 'blocks']) {
    totalsDelta[k] = Math.floor(report.totals[k] / 3);
  }
  const ranks = [0, 1, 2, 3].map((rank) => ({
    rank, path: `rank${rank}.pickle`,
    totals: Object.fromEntries(Object.entries(report.totals).map(([k, v]) => [k, v === null ? null : rank === 2 ? v * 2 : v])),
    oom_events: rank === 2 ? 1 : 0,
    top_sites: report.top_sites.slice(0, 2),
  }));
  return { ...report, diff: { totals_delta: totalsDelta, sites }, ranks, outlier_ranks: [2] };
}

async function inspect(context, htmlPath, report, name, expectCharts) {
  const page = await context.newPage();
  const errors = [];
  const requests = [];
  page.on('console', (msg) => { if (msg.type() === 'error' || msg.type() === 'warning') errors.push(`console.${msg.type()}: ${msg.text()}`); });
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  page.on('request', (req) => { if (!/^(file|data|blob|about):/.test(req.url())) requests.push(req.url()); });
  page.on('requestfailed', (req) => errors.push(`request failed: ${req.url()}`));
  await page.goto(pathToFileURL(htmlPath).href, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready]', { timeout: 20000 });
  const ready = await page.getAttribute('body', 'data-ready');
  check(ready === 'true', `${name}: every section rendered (${ready})`);
  let readyAt = await page.evaluate(() => window.memsnapReport.readyAt);
  if (readyAt >= loadLimitMs) {  // a busy machine (parallel tests): measure a second load too, keep the faster
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('body[data-ready]', { timeout: 20000 });
    readyAt = Math.min(readyAt, await page.evaluate(() => window.memsnapReport.readyAt));
  }
  check(readyAt < loadLimitMs, `${name}: drawn ${readyAt.toFixed(0)} ms after navigation start (limit ${loadLimitMs} ms)`);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

  const data = await page.evaluate(() => window.memsnapReport.data);
  check(deepEqual(data.report, report), `${name}: the inlined data is the JSON report`);

  // Every number bound to the report shows the report's value, formatted.
  const bound = await page.$$eval('[data-key]', (els) => els.map((e) => ({
    key: e.getAttribute('data-key'), value: e.getAttribute('data-value'), format: e.getAttribute('data-format'), text: e.textContent })));
  let mismatches = [];
  for (const b of bound) {
    const expected = lookup(report, b.key);
    if (b.value === null) {  // text bound without a value attribute (headline, summaries, sites)
      if (b.text !== String(expected)) mismatches.push(`${b.key}: shows ${JSON.stringify(b.text)}, report has ${JSON.stringify(expected)}`);
      continue;
    }
    const shown = JSON.parse(b.value);
    const want = expected === undefined ? null : expected;
    if (!deepEqual(shown, want)) mismatches.push(`${b.key}: value ${b.value}, report has ${JSON.stringify(want)}`);
    else if (b.text !== FORMATS[b.format](want)) mismatches.push(`${b.key}: text ${JSON.stringify(b.text)}, want ${JSON.stringify(FORMATS[b.format](want))}`);
  }
  check(bound.length >= 10 && mismatches.length === 0,
        `${name}: ${bound.length} numbers and texts match the JSON report${mismatches.length ? `; ${mismatches.slice(0, 5).join('; ')}` : ''}`);
  check(await page.locator('.pattern').count() === report.patterns.length, `${name}: ${report.patterns.length} findings shown`);
  check(await page.locator('#sites table').first().locator('tr[data-site-row]').count() === report.top_sites.length,
        `${name}: ${report.top_sites.length} top sites listed`);
  if (report.top_sites.length && report.top_sites[0].stack.length) {
    const first = page.locator('#sites table').first().locator('tr[data-site-row="0"] details');
    await first.locator('summary').click();
    const frames = await first.locator('ol.stack li').allTextContents();
    check(deepEqual(frames, report.top_sites[0].full_stack || report.top_sites[0].stack), `${name}: the top site expands to its full stack`);
  }

  // Every chart drew: a canvas with painted pixels.
  const drawn = await page.evaluate(() => [...document.querySelectorAll('.chart')].map((el) => {
    const canvas = el.querySelector('canvas');
    if (!canvas || !canvas.width || !canvas.height) return { name: el.dataset.chart, painted: 0 };
    const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let painted = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
    return { name: el.dataset.chart, painted, series: window.memsnapReport.charts[el.dataset.chart].getOption().series.length };
  }));
  for (const want of expectCharts) {
    const c = drawn.find((d) => d.name === want);
    check(c && c.painted > 2000 && c.series > 0, `${name}: chart '${want}' drew (${c ? `${c.painted} painted pixels, ${c.series} series` : 'missing'})`);
  }
  check(drawn.length === expectCharts.length, `${name}: charts ${drawn.map((d) => d.name).join(', ') || 'none'} (expected ${expectCharts.join(', ') || 'none'})`);

  // The plots agree with the report: exact peaks, OOM markers, the final segment map's totals.
  const plots = data.plots;
  if (plots) {
    (report.timeline || []).forEach((t, i) => {
      const d = plots.devices[i];
      const stackTotals = d.stack.other.map((o, k) => o + d.stack.sites.reduce((s, st) => s + st.values[k], 0));
      check(d.device === t.device && max(d.timeline.allocated) === t.peak_allocated && d.peak.allocated === t.peak_allocated &&
            max(stackTotals) === t.peak_allocated && d.peak.index === t.peak_event_index,
            `${name}: device ${t.device} plots keep the exact peak ${t.peak_allocated}`);
      const ooms = report.trace.oom.filter((o) => o.device === t.device).length;
      check(d.ooms.length === ooms, `${name}: device ${t.device} marks ${ooms} OOM events`);
      const dev = report.devices.find((x) => x.device === t.device);
      check(max(d.timeline.reserved) === dev.totals.peak_reserved && d.timeline.reserved.at(-1) === dev.totals.reserved,
            `${name}: device ${t.device} reserved curve peaks at peak_reserved and ends at reserved`);
    });
    const end = plots.segment_maps[0];
    check(end.reserved === report.totals.reserved && end.inactive === report.totals.inactive &&
          end.live === report.totals.allocated + report.totals.pending_free && end.segments_total === report.totals.segments,
          `${name}: the final segment map holds the report's segments, reserved and inactive bytes`);
  }
  // The timeline's labels (peaks, OOMs, annotations, steps) never overlap, also after a zoom.
  if (plots && plots.devices.length) {
    const overlaps = async () => page.evaluate(() => {
      const shown = ((window.memsnapReport.labels || {}).timeline || []).filter((l) => l.shown);
      const hit = [];
      for (let i = 0; i < shown.length; i++) {
        for (let j = i + 1; j < shown.length; j++) {
          const a = shown[i].box, b = shown[j].box;
          if (a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]) hit.push(`${shown[i].text} / ${shown[j].text}`);
        }
      }
      return { shown: shown.length, hit };
    });
    const before = await overlaps();
    check(before.shown > 0 && before.hit.length === 0,
          `${name}: ${before.shown} timeline labels, none overlapping${before.hit.length ? `: ${before.hit.slice(0, 3).join('; ')}` : ''}`);
    await page.evaluate(() => window.memsnapReport.charts.timeline.dispatchAction({ type: 'dataZoom', start: 20, end: 60 }));
    const after = await overlaps();
    check(after.hit.length === 0, `${name}: zoomed, ${after.shown} timeline labels, none overlapping`);
    await page.evaluate(() => window.memsnapReport.charts.timeline.dispatchAction({ type: 'dataZoom', start: 0, end: 100 }));
    // The default views show the OOM device, else the highest peak (report.default_view).
    const view = report.default_view.device;
    const bySite = await page.evaluate(() => {
      const sel = document.querySelector('#by-site select');
      return sel ? Number(sel.value) : 0;
    });
    check(plots.devices[bySite].device === view, `${name}: live memory by site shows device ${view} (${report.default_view.reason})`);
    // The segment maps list the default view's device first, then the most free bytes, then the largest.
    const free = (seg) => { let f = 0; for (let i = 0; i + 3 < seg.blocks.length; i += 4) if (seg.blocks[i + 2] === 2) f += seg.blocks[i + 1]; return f; };
    let ordered = true;
    for (const map of plots.segment_maps) {
      const first = map.device === null ? view : map.device;
      for (let i = 1; i < map.segments.length; i++) {
        const a = map.segments[i - 1], b = map.segments[i];
        const ka = [a.device !== first, -free(a), -a.size], kb = [b.device !== first, -free(b), -b.size];
        if (ka[0] > kb[0] || (ka[0] === kb[0] && (ka[1] > kb[1] || (ka[1] === kb[1] && ka[2] > kb[2])))) ordered = false;
      }
    }
    check(ordered, `${name}: segment maps list the most free bytes first`);
  }
  // The allocations' tags (compiled region, labels, annotate notes) show on their site rows.
  for (const tag of ['region', 'labels', 'notes']) {
    const want = report.top_sites.filter((x) => x[tag] && x[tag].length).length;
    const shown = await page.locator(`#sites table >> nth=0 >> [data-tag="${tag}"]`).count();
    if (want) check(shown === want, `${name}: ${want} top sites show their ${tag} (${shown} shown)`);
  }
  // A site that holds kinds besides its own says each under its category badge.
  const otherKinds = report.top_sites.reduce((n, x) => n + (x.other_kinds || []).length, 0);
  if (otherKinds) {
    const shown = await page.locator('#sites table >> nth=0 >> [data-other-kind]').count();
    check(shown === otherKinds, `${name}: the top sites show their ${otherKinds} other kinds (${shown} shown)`);
  }
  if (report.devices.length > 1) {
    const headers = await page.locator('#sites table').first().locator('th').allTextContents();
    check(headers.includes('Device'), `${name}: the top sites table has a Device column`);
  }
  check(errors.length === 0, `${name}: no console errors${errors.length ? `: ${errors.slice(0, 5).join(' | ')}` : ''}`);
  check(requests.length === 0, `${name}: no network requests${requests.length ? `: ${requests.slice(0, 3).join(' ')}` : ''}`);
  const shot = path.join(opt.artifacts, `${name}.png`);
  await page.screenshot({ path: shot, fullPage: true });
  check(fs.statSync(shot).size > 10000, `${name}: screenshot kept at ${shot}`);
  await page.close();
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'memsnap-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 1360, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
try {
  for (const snapshot of opt.snapshots) {
    const name = path.basename(snapshot).replace(/\.[^.]*$/, '');
    const report = JSON.parse(execFileSync(opt.memsnap, [snapshot, '--format', 'json'], { maxBuffer: 1 << 28 }).toString());
    const htmlPath = path.join(opt.artifacts, `${name}.html`);
    execFileSync(opt.memsnap, [snapshot, '--format', 'html', '-o', htmlPath]);
    const hasTrace = (report.timeline || []).length > 0;
    // The memory budget chart, and the block sizes of its stack-less memory when it has some.
    const main = (report.budget || []).find((b) => b.main);
    const budget = main ? ['budget', ...(main.stackless_sizes.length ? ['stackless_sizes'] : [])] : [];
    await inspect(context, htmlPath, report, name,
                  [...budget, ...(hasTrace ? ['timeline', 'by_site'] : []), ...(report.totals.segments ? ['segments'] : [])]);
    if (report.trace.oom.length && report.top_sites.length) {
      // The optional diff and ranks sections render when the JSON has them.
      const augmented = addDiffAndRanks(report);
      const html = fs.readFileSync(htmlPath, 'utf8');
      const data = JSON.parse(html.slice(html.indexOf('<script id="memsnap-data"')).replace(/^[^>]*>/, '').split('</script>')[0]);
      const extraPath = path.join(opt.artifacts, `${name}_diff_ranks.html`);
      fs.writeFileSync(extraPath, withData(html, { report: augmented, plots: data.plots }));
      await inspect(context, extraPath, augmented, `${name}_diff_ranks`,
                    [...budget, ...(hasTrace ? ['timeline', 'by_site'] : []), 'segments', 'diff', 'ranks']);
    }
  }
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
