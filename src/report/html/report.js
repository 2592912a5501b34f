/* memsnap HTML report: builds the page from the inlined JSON ({report, plots}) and draws the charts
 * with the inlined Apache ECharts. Text from the snapshot (file names, functions) only ever goes
 * into the page as text nodes, or HTML-escaped in chart tooltips. */
(function () {
  'use strict';

  var started = performance.now();
  var data = JSON.parse(document.getElementById('memsnap-data').textContent);
  var report = data.report || {};
  var plots = data.plots || null;
  var charts = {};
  var state = { data: data, charts: charts, ready: false, renderMs: null, errors: [] };
  window.memsnapReport = state;

  var STATE_COLORS = ['#3566d6', '#9b59b6', '#f29f3d', '#aab2c0', '#d0d4db'];
  var STATE_LABELS = { allocated: 'allocated', pending_free: 'pending free', inactive: 'inactive (free, reserved)',
                       merged: 'merged small blocks', unknown: 'unknown state' };
  var DEVICE_COLORS = ['#3566d6', '#d9622b', '#2e8b57', '#8e44ad', '#b8860b', '#1f8a9e', '#c2185b', '#5d6d7e'];
  var SITE_COLORS = ['#3566d6', '#f29f3d', '#2e9e6b', '#d9534f', '#8e6cc6', '#1f9fb4', '#c9a227', '#e377c2', '#6b8e23'];
  var VERDICT_CLASS = { problem: 'problem', leak: 'leak', info: 'info', expected: 'expected' };

  // ---- Formatting (binary units, as the text report) ------------------------------------------
  function fmtBytes(b) {
    if (b === null || b === undefined) return '\u2014';
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    var neg = b < 0, v = Math.abs(b), u = 0;
    while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
    if (u === 0) return (neg ? '-' : '') + Math.trunc(v) + ' B';
    return (neg ? '-' : '') + v.toFixed(2) + ' ' + units[u];
  }
  function fmtSignedBytes(b) { return (b > 0 ? '+' : '') + fmtBytes(b); }
  function fmtAxisBytes(b) {
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    var neg = b < 0, v = Math.abs(b), u = 0;
    while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
    var digits = u === 0 || v >= 100 || Number.isInteger(v) ? 0 : v >= 10 ? 1 : 2;
    return (neg ? '-' : '') + v.toFixed(digits) + ' ' + units[u];
  }
  // Axis bounds and tick interval in binary units (1, 2, 4, 5, 10, ... KiB/MiB/GiB), about `ticks` ticks.
  function binaryAxis(lo, hi, ticks) {
    if (!isFinite(lo) || !isFinite(hi)) return {};
    var span = Math.max(Math.abs(lo), Math.abs(hi), hi - lo);
    if (!(span > 0)) return {};
    var unit = 1;
    while (span / unit >= 1024 && unit < Math.pow(1024, 5)) unit *= 1024;
    var steps = [1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000];
    var step = unit * 1000;
    for (var i = 0; i < steps.length; i++) {
      if ((hi - Math.min(lo, 0)) / (steps[i] * unit) <= (ticks || 6)) { step = steps[i] * unit; break; }
    }
    return { min: lo < 0 ? -Math.ceil(-lo / step) * step : 0, max: Math.max(step, Math.ceil(hi / step) * step), interval: step };
  }
  function bytesAxis(lo, hi, extra) {
    return Object.assign({ type: 'value', axisLabel: { formatter: fmtAxisBytes } }, binaryAxis(lo, hi, 6), extra || {});
  }
  function fmtCount(n) { return n === null || n === undefined ? '\u2014' : Number(n).toLocaleString('en-US'); }
  function fmtSigned(n) { return (n > 0 ? '+' : '') + fmtCount(n); }
  function fmtPercent(p) { return p === null || p === undefined ? '\u2014' : Number(p).toFixed(2) + ' %'; }
  function fmtSeconds(s) { return s < 10 ? s.toFixed(3) + ' s' : s < 1000 ? s.toFixed(2) + ' s' : s.toFixed(0) + ' s'; }
  var FORMATS = { bytes: fmtBytes, signed_bytes: fmtSignedBytes, count: fmtCount, signed_count: fmtSigned,
                  percent: fmtPercent, text: function (v) { return v === null || v === undefined ? '\u2014' : String(v); } };

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }
  // The device the default views show (report.default_view: the OOM device, else the highest peak).
  function viewDevice() { var v = report.default_view || {}; return v.device === undefined ? null : v.device; }
  function viewReason() {
    var r = (report.default_view || {}).reason;
    return r === 'oom' ? 'the OOM device' : r === 'highest_peak' ? 'the highest peak' : r === 'most_live' ? 'the most live memory' : '';
  }
  function viewIndex(devices) {
    var want = viewDevice();
    for (var i = 0; i < devices.length; i++) if (devices[i].device === want) return i;
    return 0;
  }

  // Label layout: each label is a w x h box anchored at (x, y) on one side of its point ('top',
  // 'right', 'left' or 'bottom', `distance` pixels away) and may move by one of its `shifts`
  // ([dx, dy] pixels, tried in order); it takes the first shift whose box stays inside `bounds` and
  // overlaps no label placed before it. A label that fits nowhere is hidden: its full text stays in
  // the tooltip. Returns, per label, the index of its shift or -1.
  function labelBox(l, shift) {
    var d = l.distance || 0, x = l.x + shift[0], y = l.y + shift[1];
    if (l.side === 'right') return [x + d, y - l.h / 2, x + d + l.w, y + l.h / 2];
    if (l.side === 'left') return [x - d - l.w, y - l.h / 2, x - d, y + l.h / 2];
    if (l.side === 'bottom') return [x - l.w / 2, y + d, x + l.w / 2, y + d + l.h];
    return [x - l.w / 2, y - d - l.h, x + l.w / 2, y - d];
  }
  function boxesOverlap(a, b) { return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]; }
  function layoutLabels(labels, bounds) {
    var placed = [];
    return labels.map(function (l) {
      for (var k = 0; k < l.shifts.length; k++) {
        var box = labelBox(l, l.shifts[k]);
        var inside = !bounds || (box[0] >= bounds[0] && box[1] >= bounds[1] && box[2] <= bounds[2] && box[3] <= bounds[3]);
        if (inside && !placed.some(function (p) { return boxesOverlap(p, box); })) { placed.push(box); return k; }
      }
      return -1;
    });
  }
  var measureCtx = null;
  function textWidth(text, font) {
    if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
    measureCtx.font = font;
    return Math.ceil(measureCtx.measureText(text).width);
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + '\u2026' : text; }
  state.layoutLabels = layoutLabels;  // for tests

  function basename(path) { var i = String(path).lastIndexOf('/'); return i < 0 ? String(path) : String(path).slice(i + 1); }
  function shortSite(site) { return site.indexOf('[') === 0 ? site : basename(site); }
  function deviceName(d) { return 'cuda:' + d; }

  // ---- DOM helpers ------------------------------------------------------------------------------
  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === undefined || v === null || v === false) return;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k === 'style') el.setAttribute('style', v);
        else el.setAttribute(k, v === true ? '' : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }
  function append(el, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(el, c); }); return; }
    el.appendChild(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
  }
  // A number bound to its place in the JSON report, so tests can check what is shown.
  function val(key, value, format, cls) {
    var text = (FORMATS[format] || FORMATS.text)(value);
    return h('span', { class: cls, 'data-key': key, 'data-value': JSON.stringify(value === undefined ? null : value),
                       'data-format': format }, text);
  }
  function badge(text, kind) { return h('span', { class: 'badge ' + (kind || 'neutral') }, text); }
  function stat(label, key, value, format, sub) {
    return h('div', { class: 'stat' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, val(key, value, format)),
             sub ? h('div', { class: 'sub' }, sub) : null);
  }
  function table(headers, rows, numeric) {
    var head = h('tr', null, headers.map(function (t, i) { return h('th', { class: numeric && numeric[i] ? 'num' : null }, t); }));
    return h('div', { class: 'table-wrap' }, h('table', null, h('thead', null, head), h('tbody', null, rows)));
  }
  function td(content, num) { return h('td', { class: num ? 'num' : null }, content); }

  var app = document.getElementById('app');
  var nav = document.getElementById('nav');
  function section(id, title, lede) {
    var s = h('section', { id: id }, h('h2', null, title), lede ? h('p', { class: 'lede' }, lede) : null);
    app.appendChild(s);
    nav.appendChild(h('a', { href: '#' + id }, title));
    return s;
  }
  function guarded(name, fn) {
    try { fn(); } catch (e) {
      state.errors.push(name + ': ' + e);
      console.error('memsnap report: ' + name + ' failed:', e);
      app.appendChild(h('p', { class: 'notice' }, 'The ' + name + ' section could not be drawn: ' + e));
    }
  }

  // ---- Charts ---------------------------------------------------------------------------------
  function makeChart(name, container, option, cls) {
    var el = h('div', { class: 'chart' + (cls ? ' ' + cls : ''), 'data-chart': name });
    container.appendChild(el);
    var chart = echarts.init(el, null, { renderer: 'canvas' });
    chart.setOption(Object.assign({ animation: false, aria: { enabled: true }, textStyle: { fontFamily: 'system-ui, "DejaVu Sans", sans-serif' } }, option));
    charts[name] = chart;
    return chart;
  }
  window.addEventListener('resize', function () { Object.keys(charts).forEach(function (k) { charts[k].resize(); }); });

  var timed = plots && plots.x_axis === 'time';
  function xOf(m) { return timed ? m.t_us / 1e6 : m.index; }
  function xs(line) { return timed ? line.t_us.map(function (t) { return t / 1e6; }) : line.index; }
  function max(xs) { var m = -Infinity; for (var i = 0; i < xs.length; i++) if (xs[i] > m) m = xs[i]; return m; }
  function zip(x, y) { var out = new Array(x.length); for (var i = 0; i < x.length; i++) out[i] = [x[i], y[i]]; return out; }
  function xAxisOption() {
    return { type: 'value', name: timed ? 'time since the first event' : 'trace event', nameLocation: 'middle', nameGap: 26,
             min: 'dataMin', max: 'dataMax', axisLabel: { formatter: function (v) { return timed ? fmtSeconds(v) : fmtCount(v); } },
             splitLine: { show: false } };
  }
  function xTitle(x) { return timed ? 't = ' + fmtSeconds(x) : 'after event ' + fmtCount(x); }
  function zoom() {
    return [{ type: 'inside', xAxisIndex: 0, filterMode: 'none' },
            { type: 'slider', xAxisIndex: 0, filterMode: 'none', height: 16, bottom: 6, labelFormatter: '' }];
  }

  // ---- Sections ---------------------------------------------------------------------------------
  function renderSource() {
    var inp = report.input || {};
    var src = document.getElementById('source');
    append(src, [h('code', null, inp.path || ''), ' \u00b7 ', inp.format || '?',
                 inp.compression ? ' (' + inp.compression + ')' : '', ' \u00b7 ', val('input.bytes', inp.bytes, 'bytes'), ' on disk',
                 inp.pickle_protocol ? ' \u00b7 pickle protocol ' + inp.pickle_protocol : '']);
    document.title = 'memsnap: ' + basename(inp.path || 'report');
  }

  // The four knobs of allocator_settings that change what the allocator does with free memory.
  function settingsLine(st) {
    if (!st) return 'not in the snapshot (recorded from PyTorch 2.1 on)';
    var conf = st.PYTORCH_CUDA_ALLOC_CONF ? "PYTORCH_CUDA_ALLOC_CONF '" + st.PYTORCH_CUDA_ALLOC_CONF + "'" : 'PYTORCH_CUDA_ALLOC_CONF unset';
    var knobs = [];
    if ('expandable_segments' in st) knobs.push('expandable_segments ' + (st.expandable_segments ? 'on' : 'off'));
    if ('max_split_size' in st) knobs.push('max_split_size ' + (st.max_split_size < 0 ? 'unlimited' : fmtBytes(st.max_split_size)));
    if ('garbage_collection_threshold' in st) knobs.push('garbage_collection_threshold ' + st.garbage_collection_threshold);
    if ('roundup_power2_divisions' in st) {
      var d = st.roundup_power2_divisions, on = [];
      Object.keys(d || {}).forEach(function (k) { if (d[k]) on.push(k + ':' + d[k]); });
      knobs.push('roundup_power2_divisions ' + (on.length ? on.join(' ') : 'none'));
    }
    return knobs.length ? conf + ': ' + knobs.join(', ') : conf;
  }

  function renderOverview() {
    var patterns = report.patterns || [];
    var problem = patterns.some(function (p) { return p.verdict === 'problem' || p.verdict === 'leak'; });
    var s = section('overview', 'Overview');
    s.appendChild(h('p', { class: 'headline ' + (problem ? 'problem' : 'ok'), 'data-key': 'headline' }, report.headline || ''));
    if (patterns.length) {
      s.appendChild(h('div', { class: 'chips' }, patterns.map(function (p) {
        return badge(p.id + ' \u00b7 ' + p.verdict + ' \u00b7 ' + p.confidence, VERDICT_CLASS[p.verdict]);
      })));
    }
    var t = report.totals || {};
    s.appendChild(h('div', { class: 'stats' }, [
      stat('Reserved', 'totals.reserved', t.reserved, 'bytes', 'sum of segment sizes'),
      stat('Allocated', 'totals.allocated', t.allocated, 'bytes', 'live blocks (rounded sizes)'),
      stat('Pending free', 'totals.pending_free', t.pending_free, 'bytes', 'freed, awaiting stream events'),
      stat('Inactive', 'totals.inactive', t.inactive, 'bytes', 'reserved but free'),
      stat('Largest inactive block', 'totals.largest_inactive_block', t.largest_inactive_block, 'bytes'),
      stat('Peak allocated', 'totals.peak_allocated', t.peak_allocated, 'bytes', 'live requested bytes in the trace'),
      stat('Peak reserved', 'totals.peak_reserved', t.peak_reserved, 'bytes'),
      stat('Segments', 'totals.segments', t.segments, 'count'),
      stat('Blocks', 'totals.blocks', t.blocks, 'count'),
      stat('OOM events', 'trace.oom.length', ((report.trace || {}).oom || []).length, 'count')
    ]));
    s.appendChild(h('p', { class: 'settings' }, 'Allocator settings: ' + settingsLine(report.allocator_settings)));
    var devices = report.devices || [];
    if (devices.length > 1) {
      s.appendChild(h('h3', null, 'Per device'));
      s.appendChild(table(['Device', 'Reserved', 'Allocated', 'Inactive', 'Peak allocated', 'Peak reserved'],
        devices.map(function (d, i) {
          var k = 'devices.' + i + '.totals.';
          return h('tr', null, td(deviceName(d.device)), td(val(k + 'reserved', d.totals.reserved, 'bytes'), true),
                   td(val(k + 'allocated', d.totals.allocated, 'bytes'), true), td(val(k + 'inactive', d.totals.inactive, 'bytes'), true),
                   td(val(k + 'peak_allocated', d.totals.peak_allocated, 'bytes'), true),
                   td(val(k + 'peak_reserved', d.totals.peak_reserved, 'bytes'), true));
        }), [false, true, true, true, true, true]));
    }
  }

  function renderFindings() {
    var s = section('findings', 'Findings', 'Patterns the snapshot\u2019s own numbers support, with their evidence and fixes.');
    var patterns = report.patterns || [];
    if (!patterns.length) s.appendChild(h('p', { class: 'notice' }, 'No problem pattern was found in this snapshot.'));
    s.appendChild(h('div', { class: 'patterns' }, patterns.map(function (p, i) {
      return h('div', { class: 'pattern ' + (VERDICT_CLASS[p.verdict] || ''), 'data-pattern': p.id },
        h('div', { class: 'pattern-head' }, h('span', { class: 'pattern-title' }, p.id.replace(/_/g, ' ')),
          badge(p.verdict, VERDICT_CLASS[p.verdict]), badge(p.confidence + ' confidence')),
        h('p', { 'data-key': 'patterns.' + i + '.summary' }, p.summary),
        h('div', { class: 'cols' },
          h('div', null, h('h4', null, 'Evidence'), h('ul', null, (p.evidence || []).map(function (e) { return h('li', null, e); }))),
          h('div', null, h('h4', null, 'Fix'), h('ul', null, (p.fix || []).map(function (f) { return h('li', null, f); })),
            (p.sites || []).length ? [h('h4', null, 'Sites'), h('ul', null, p.sites.map(function (x) { return h('li', { class: 'site' }, x); }))] : null)));
    })));
    var ooms = (report.trace || {}).oom || [];
    if (ooms.length) {
      s.appendChild(h('h3', null, 'Out-of-memory events'));
      s.appendChild(table(['#', 'Device', 'Request', 'Device free', 'Verdict', 'Site', 'Reason'], ooms.map(function (o, i) {
        var k = 'trace.oom.' + i + '.';
        return h('tr', null, td(String(i + 1)), td(deviceName(o.device)), td(val(k + 'size', o.size, 'bytes'), true),
                 td(val(k + 'device_free', o.device_free, 'bytes'), true),
                 td(o.verdict ? badge(o.verdict, o.verdict === 'unclear' ? 'neutral' : 'problem') : '\u2014'),
                 td(h('span', { class: 'site' }, o.site || '\u2014')), td(o.reason || ''));
      }), [false, false, true, true]));
    }
    s.appendChild(h('h3', null, 'Next steps'));
    s.appendChild(h('ol', { class: 'steps' }, (report.next_steps || []).map(function (x) { return h('li', null, x); })));
    if ((report.uncertainties || []).length) {
      s.appendChild(h('h3', null, 'What this snapshot cannot tell'));
      s.appendChild(h('ul', { class: 'plain' }, report.uncertainties.map(function (x) { return h('li', null, x); })));
    }
  }

  // Phases (forward, backward, optimizer step, zero_grad, evaluation) as shaded bands along the
  // bottom of the timeline, one colour a phase; the band holding the peak is outlined.
  var PHASE_COLORS = { forward: 'rgba(66,133,244,0.13)', backward: 'rgba(234,134,38,0.15)', optimizer_step: 'rgba(52,168,83,0.16)',
                       zero_grad: 'rgba(120,120,120,0.16)', evaluation: 'rgba(142,84,196,0.12)' };
  function phaseBands(d, deviceCount) {
    return (d.phases || []).map(function (b) {
      var label = (deviceCount > 1 ? deviceName(d.device) + ': ' : '') + b.label + (b.iteration ? ', iteration ' + b.iteration : '') +
        (b.peak ? ' (the peak)' : '');
      return [{ xAxis: xOf(b.from), name: label,
                itemStyle: { color: PHASE_COLORS[b.phase] || 'rgba(0,0,0,0.05)', borderColor: b.peak ? '#c8372d' : undefined,
                             borderWidth: b.peak ? 1 : 0 }, label: { show: false } },
              { xAxis: xOf(b.to) }];
    });
  }

  var POINT_FONT = '600 12px system-ui, "DejaVu Sans", sans-serif';
  var MARK_FONT = '10px system-ui, "DejaVu Sans", sans-serif';
  var POINT_SHIFTS = [[0, 0], [0, -22], [0, 22], [0, -44], [0, 44], [0, -66]];
  var MARK_ROWS = 4;

  // Labels of the peaks and OOMs (markPoint labels of the allocated lines) and of the annotations
  // (an invisible scatter series along the top of the plot), laid out so that none overlaps:
  // again after every zoom, since the pixel positions change.
  function timelineLabels(chart, series, labels) {
    function relayout() {
      var w = chart.getWidth(), hgt = chart.getHeight();
      var grid = [78, 44, w - 30, hgt - 70];
      var boxes = labels.map(function (l) {
        var px = chart.convertToPixel({ gridIndex: 0 }, l.coord);
        var inside = px && px[0] >= grid[0] - 1 && px[0] <= grid[2] + 1;
        return { x: px ? px[0] : 0, y: l.top ? grid[1] : (px ? px[1] : 0), w: textWidth(l.text, l.font) + l.pad, h: l.h, side: l.side,
                 distance: l.distance, shifts: inside ? l.shifts : [] };
      });
      var chosen = layoutLabels(boxes, [0, 0, w, grid[3]]);
      var shown = [];
      labels.forEach(function (l, i) {
        var k = chosen[i];
        l.label.show = k >= 0;
        l.label.offset = k >= 0 ? l.shifts[k] : [0, 0];
        shown.push({ text: l.text, shown: k >= 0, box: k >= 0 ? labelBox(boxes[i], l.shifts[k]) : null });
      });
      chart.setOption({ series: series.map(function (x) {
        if (x.markPoint) return { markPoint: { data: x.markPoint.data }, markArea: { data: x.markArea.data } };
        return x.id === 'annotations' ? { data: x.data } : {};
      }) });
      state.labels = state.labels || {};
      state.labels.timeline = shown;
    }
    relayout();
    chart.on('datazoom', relayout);
    window.addEventListener('resize', relayout);
  }

  function renderTimeline() {
    var devices = plots ? plots.devices : [];
    var vi = viewIndex(devices);
    var many = devices.length > 1;
    var s = section('timeline', 'Memory over time',
      'Allocated: live requested bytes after each trace event (alloc \u2192 free_completed), reconstructed backwards from the ' +
      'final state. Reserved: the segments PyTorch held. Shaded bands are profiler steps, coloured bands the phases (forward ' +
      'blue, backward orange, optimizer step green, zero_grad grey, evaluation purple; the peak\'s outlined), and dotted lines other ' +
      'external_annotations; the peak and OOM events are marked. Drag the slider or scroll to zoom.' +
      (many ? ' Every device is drawn; ' + deviceName(devices[vi].device) + ' (' + viewReason() + ') is the default view: its line is ' +
              'filled and its phases and annotations are drawn.' : ''));
    if (!devices.length) {
      s.appendChild(h('p', { class: 'notice' }, 'This snapshot has no trace history, so memory over time cannot be drawn. Record ' +
        'it with torch.cuda.memory._record_memory_history(max_entries=100000) before the code you want to see.'));
      return;
    }
    var series = [];
    var labels = [];  // every text label on the chart, for timelineLabels
    var top = 0;
    devices.forEach(function (d) { top = Math.max(top, max(d.timeline.allocated), max(d.timeline.reserved)); });
    var yMax = binaryAxis(0, top * 1.06, 6).max || top * 1.06;
    // The annotations of the default view's device (annotations are usually per process).
    var steps = devices[vi].steps.length ? devices[vi].steps : devices[0].steps;
    devices.forEach(function (d, di) {
      var color = DEVICE_COLORS[di % DEVICE_COLORS.length];
      var isView = di === vi;
      var x = xs(d.timeline);
      var x0 = x[0], x1 = x[x.length - 1];
      function side(xv, right) { var f = x1 > x0 ? (xv - x0) / (x1 - x0) : 0.5; return f > right ? 'left' : f < 0.12 ? 'right' : null; }
      var points = [];
      function pointLabel(point, text, position, distance) {
        point.label = { show: true, position: position, distance: 8, offset: [0, 0], formatter: text, color: point.itemStyle.color,
                        fontWeight: 600, backgroundColor: 'rgba(255,255,255,0.9)', padding: [2, 4], borderRadius: 3 };
        points.push(point);
        labels.push({ label: point.label, text: text, font: POINT_FONT, pad: 8, h: 20, coord: point.coord, side: position,
                      distance: distance, shifts: POINT_SHIFTS });
      }
      if (d.peak.allocated !== null) {
        pointLabel({ name: 'peak', coord: [xOf(d.peak), d.peak.allocated], value: d.peak.allocated, symbol: 'circle', symbolSize: 9,
                     itemStyle: { color: color, borderColor: '#fff', borderWidth: 1.5 } },
                   (many ? deviceName(d.device) + ' ' : '') + 'peak ' + fmtBytes(d.peak.allocated), side(xOf(d.peak), 0.85) || 'top', 12.5);
      }
      var lines = [];
      d.ooms.forEach(function (o) {
        pointLabel({ name: 'OOM', coord: [xOf(o), o.allocated], value: o.size, symbol: 'triangle', symbolSize: 12, symbolRotate: 180,
                     itemStyle: { color: '#c8372d' } },
                   'OOM #' + (o.oom + 1) + ': ' + fmtBytes(o.size) + ' failed', side(xOf(o), 0.7) || 'right', 14);
        lines.push({ xAxis: xOf(o), name: 'OOM #' + (o.oom + 1) + ': a request of ' + fmtBytes(o.size) + ' failed (' + o.verdict + ')',
                     lineStyle: { color: '#c8372d', type: 'solid', width: 1.2 }, label: { show: false } });
      });
      // Profiler steps (START..END) become alternating bands; other annotations dotted lines.
      var isStep = function (m) { return /ProfilerStep#\d+/.test(m.name); };
      var open = {}, bands = [], marks = [];
      (isView ? steps : []).forEach(function (m) {
        if (!isStep(m)) { if (m.stage !== 'END') marks.push(m); return; }
        if (m.stage === 'END') { if (open[m.name]) { bands.push([open[m.name], m]); delete open[m.name]; } } else open[m.name] = m;
      });
      Object.keys(open).forEach(function (k) { marks.push(open[k]); });
      var labelBands = isView && bands.length <= 30;
      marks.forEach(function (m) {
        lines.push({ xAxis: xOf(m), name: m.name + (m.stage ? ' (' + m.stage + ')' : ''),
          lineStyle: { color: '#8f98ab', type: 'dotted', width: 1, opacity: 0.8 }, label: { show: false } });
      });
      var name = many ? deviceName(d.device) + ' ' : '';
      series.push({ name: name + 'allocated', type: 'line', data: zip(x, d.timeline.allocated), showSymbol: false, color: color,
        lineStyle: { width: isView ? 1.8 : 1.2 }, areaStyle: isView ? { opacity: 0.10 } : undefined, z: isView ? 4 : 3,
        markPoint: { data: points, animation: false },
        markLine: { symbol: ['none', 'none'], data: lines, animation: false,
                    tooltip: { formatter: function (p) { return escapeHtml(p.name); } } },
        markArea: { silent: false, animation: false, tooltip: { formatter: function (p) { return escapeHtml(p.name); } },
                    data: bands.map(function (b, i) {
          var label = { show: labelBands, position: 'insideTop', fontSize: 10, color: '#6b7486', offset: [0, 0] };
          var text = b[0].name.replace(/^.*ProfilerStep#/, 'step ');
          if (labelBands) {
            labels.push({ label: label, text: text, font: MARK_FONT, pad: 2, h: 14, coord: [(xOf(b[0]) + xOf(b[1])) / 2, yMax], top: true,
                          side: 'bottom', distance: 4, shifts: [[0, 0]] });
          }
          return [{ xAxis: xOf(b[0]), name: b[0].name + ' (' + fmtBytes(b[0].live_bytes) + ' live at its start)',
                    itemStyle: { color: i % 2 ? 'rgba(110,120,145,0.05)' : 'rgba(110,120,145,0.11)' }, label: label },
                  { xAxis: xOf(b[1]) }];
        }) } });
      series.push({ name: name + 'reserved', type: 'line', step: 'end', data: zip(x, d.timeline.reserved), showSymbol: false,
        color: color, lineStyle: { width: 1.3, type: 'dashed', opacity: 0.75 }, z: 2,
        markArea: { silent: false, animation: false, data: isView ? phaseBands(d, devices.length) : [],
                    tooltip: { formatter: function (p) { return escapeHtml(p.name); } } } });
      if (isView) {
        // The annotations' labels, in rows along the top of the plot (the full name in the tooltip).
        var annotations = { id: 'annotations', name: 'annotations', type: 'scatter', symbolSize: 6, z: 5, itemStyle: { color: 'rgba(0,0,0,0)' },
          tooltip: { trigger: 'item', formatter: function (p) { return escapeHtml(p.data.full); } }, data: [] };
        marks.slice(0, 60).forEach(function (m) {
          var text = clip(m.name, 36);
          var label = { show: true, position: 'right', distance: 3, offset: [0, 0], formatter: text, fontSize: 10, color: '#6b7486',
                        backgroundColor: 'rgba(255,255,255,0.85)', padding: [1, 2] };
          annotations.data.push({ value: [xOf(m), yMax], full: m.name + (m.stage ? ' (' + m.stage + ')' : ''), label: label });
          var shifts = [];
          for (var r = 0; r < MARK_ROWS; r++) shifts.push([0, 10 + 14 * r]);
          labels.push({ label: label, text: text, font: MARK_FONT, pad: 4, h: 14, coord: [xOf(m), yMax], top: true, side: 'right',
                        distance: 3, shifts: shifts });
        });
        series.push(annotations);
      }
    });
    var chart = makeChart('timeline', s, {
      legend: { top: 0, data: series.filter(function (x) { return x.id !== 'annotations'; }).map(function (x) { return x.name; }) },
      grid: { left: 78, right: 30, top: 44, bottom: 70 },
      tooltip: { trigger: 'axis', axisPointer: { type: 'line' }, formatter: function (ps) {
        var rows = ps.filter(function (p) { return p.seriesId !== 'annotations'; }).map(function (p) {
          return p.marker + escapeHtml(p.seriesName) + ': <b>' + fmtBytes(p.value[1]) + '</b>';
        });
        return rows.length ? escapeHtml(xTitle(ps[0].value[0])) + '<br>' + rows.join('<br>') : '';
      } },
      xAxis: xAxisOption(),
      yAxis: bytesAxis(0, top * 1.06),
      dataZoom: zoom(),
      series: series
    }, 'tall');
    timelineLabels(chart, series, labels);
    var caption = h('p', { class: 'caption' });
    (report.timeline || []).forEach(function (t, i) {
      append(caption, [i ? ' \u00b7 ' : '', deviceName(t.device) + ': peak ', val('timeline.' + i + '.peak_allocated', t.peak_allocated, 'bytes'),
                       ' after event ', val('timeline.' + i + '.peak_event_index', t.peak_event_index, 'count'), ' of ',
                       val('timeline.' + i + '.events', t.events, 'count')]);
      var d = plots.devices[i];
      if (i === vi && d && d.steps_total > d.steps.length) {
        append(caption, ' (' + d.steps.length + ' of ' + d.steps_total + ' step marks drawn' + (many ? ', from ' + deviceName(d.device) : '') + ')');
      }
    });
    var dropped = (report.trace || {}).dropped;
    if (dropped) append(caption, [' \u00b7 ', val('trace.dropped', dropped, 'count'), ' older events were dropped (--max-trace-events)']);
    s.appendChild(caption);
  }

  function renderBySite() {
    var devices = plots ? plots.devices : [];
    if (!devices.length) return;
    var s = section('by-site', 'Live memory by site',
      'The allocated curve split by the code that allocated it (the innermost user frame): the sites with the most live memory ' +
      'at any point of the trace, and the one that grew most, stacked; everything else is \u201cother\u201d.');
    var controls = h('div', { class: 'controls' });
    s.appendChild(controls);
    var caption = h('p', { class: 'caption' });
    var chart = null;
    function option(d) {
      var x = xs(d.stack);
      var names = {};
      var series = d.stack.sites.map(function (st, i) {
        var site = plots.sites[st.site];
        var name = shortSite(site.site) + (site.function ? ' ' + site.function : '');
        if (names[name]) name += ' (' + (i + 1) + ')';
        names[name] = site;
        return { name: name, type: 'line', stack: 'live', data: zip(x, st.values), showSymbol: false, lineStyle: { width: 0.8 },
                 areaStyle: { opacity: 0.85 }, color: SITE_COLORS[i % SITE_COLORS.length], emphasis: { focus: 'series' } };
      });
      series.push({ name: 'other', type: 'line', stack: 'live', data: zip(x, d.stack.other), showSymbol: false,
                    lineStyle: { width: 0.5 }, areaStyle: { opacity: 0.7 }, color: '#c3c8d2' });
      var totals = d.stack.other.map(function (o, k) { return d.stack.sites.reduce(function (t, st) { return t + st.values[k]; }, o); });
      return {
        legend: { top: 0, type: 'scroll', tooltip: { show: true },
                  formatter: function (n) { return n.length > 48 ? n.slice(0, 46) + '\u2026' : n; } },
        grid: { left: 78, right: 30, top: 44, bottom: 70 },
        tooltip: { trigger: 'axis', formatter: function (ps) {
          var total = 0;
          var rows = ps.slice().sort(function (a, b) { return b.value[1] - a.value[1]; }).map(function (p) {
            total += p.value[1];
            var site = names[p.seriesName];
            return p.marker + escapeHtml(site ? site.site : p.seriesName) + ': <b>' + fmtBytes(p.value[1]) + '</b>';
          });
          return escapeHtml(xTitle(ps[0].value[0])) + ' \u00b7 total ' + fmtBytes(total) + '<br>' + rows.join('<br>');
        } },
        xAxis: xAxisOption(),
        yAxis: bytesAxis(0, max(totals) * 1.06),
        dataZoom: zoom(),
        series: series
      };
    }
    function show(i) {
      var d = devices[i];
      if (!chart) chart = makeChart('by_site', s, option(d), 'tall');
      else chart.setOption(option(d), { notMerge: true });
      caption.textContent = '';
      var g = d.stack.growing_site;
      if (g !== null && g !== undefined) {
        var grown = d.stack.sites.filter(function (st) { return st.site === g; })[0];
        append(caption, ['Grew most over the trace window on ' + deviceName(d.device) + ': ', h('span', { class: 'site' }, plots.sites[g].site),
                         ' (' + plots.sites[g].function + ') ', grown ? fmtSignedBytes(grown.growth) : '', grown ? ', from ' +
                         fmtBytes(grown.start) + ' to ' + fmtBytes(grown.end) + '.' : '']);
      } else {
        append(caption, 'No site grew over the trace window on ' + deviceName(d.device) + '.');
      }
      s.appendChild(caption);
    }
    var first = viewIndex(devices);  // the default view's device
    if (devices.length > 1) {
      var sel = h('select', { 'aria-label': 'Device' }, devices.map(function (d, i) {
        return h('option', { value: i, selected: i === first }, deviceName(d.device) + (i === first && viewReason() ? ' (' + viewReason() + ')' : ''));
      }));
      sel.addEventListener('change', function () { show(Number(sel.value)); });
      append(controls, ['Device ', sel]);
    } else {
      controls.remove();
    }
    show(first);
  }

  function renderSegments() {
    var maps = plots ? plots.segment_maps : [];
    if (!maps || !maps.length || !maps[0].segments_total) return;
    var s = section('segments', 'Segment map',
      'Each bar is a segment cudaMalloc reserved; its blocks are coloured by state. Inactive blocks between live ones are ' +
      'fragmentation: memory that is reserved and free but only usable by requests that fit the hole. Segments with the most ' +
      'free (inactive) bytes come first, then the largest' + ((report.devices || []).length > 1 && viewDevice() !== null ?
      '; the default view\u2019s device (' + deviceName(viewDevice()) + ', ' + viewReason() + ') before the others.' : '.'));
    var controls = h('div', { class: 'controls' });
    s.appendChild(controls);
    var host = h('div');
    s.appendChild(host);
    var caption = h('p', { class: 'caption' });
    s.appendChild(caption);
    var current = maps.length > 1 ? maps.length - 1 : 0;  // the newest OOM when there is one
    var fit = false;
    var chart = null;
    var states = plots.block_states;

    function rowLabel(seg) { return (maps.length && hasManyDevices() ? deviceName(seg.device) + ' ' : '') + seg.pool + ' s' + seg.stream + ' ' + seg.address; }
    function hasManyDevices() { return (report.devices || []).length > 1; }
    function option(map) {
      var labels = map.segments.map(function (seg) { return rowLabel(seg) + '  ' + fmtAxisBytes(seg.size); });
      var byState = states.map(function () { return []; });
      map.segments.forEach(function (seg, row) {
        var b = seg.blocks;
        for (var i = 0; i + 3 < b.length; i += 4) {
          var scale = fit ? 100 / seg.size : 1;
          byState[b[i + 2]].push([b[i] * scale, (b[i] + b[i + 1]) * scale, row, b[i + 1], b[i + 3], b[i]]);
        }
      });
      var rows = map.segments.length;
      var visible = Math.min(rows, 36);
      var series = [];
      states.forEach(function (name, st) {
        if (!byState[st].length) return;
        series.push({ name: STATE_LABELS[name] || name, type: 'custom', data: byState[st], color: STATE_COLORS[st],
          encode: { x: [0, 1], y: 2 }, clip: true,
          renderItem: function (params, api) {
            var start = api.coord([api.value(0), api.value(2)]);
            var end = api.coord([api.value(1), api.value(2)]);
            var height = api.size([0, 1])[1] * 0.72;
            var rect = echarts.graphic.clipRectByRect(
              { x: start[0], y: start[1] - height / 2, width: Math.max(end[0] - start[0], 0.6), height: height },
              { x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height });
            return rect && { type: 'rect', shape: rect, style: api.style({ stroke: 'rgba(255,255,255,0.55)', lineWidth: 0.5 }) };
          } });
      });
      var zoomY = rows > visible ? [
        { type: 'slider', yAxisIndex: 0, right: 6, width: 14, startValue: 0, endValue: visible - 1, showDetail: false, brushSelect: false },
        { type: 'inside', yAxisIndex: 0, startValue: 0, endValue: visible - 1, zoomOnMouseWheel: false, moveOnMouseWheel: true, moveOnMouseMove: false }
      ] : [];
      return {
        legend: { top: 0 },
        grid: { left: 12, right: rows > visible ? 44 : 34, top: 34, bottom: 46, containLabel: true },
        tooltip: { trigger: 'item', formatter: function (p) {
          var seg = map.segments[p.value[2]];
          var site = p.value[4] >= 0 ? plots.sites[p.value[4]] : null;
          return escapeHtml(rowLabel(seg)) + ' (' + fmtBytes(seg.size) + ')<br>' + p.marker + escapeHtml(p.seriesName) + ': <b>' +
                 fmtBytes(p.value[3]) + '</b> at +' + fmtBytes(p.value[5]) +
                 (site ? '<br>' + escapeHtml(site.site) + ' ' + escapeHtml(site.function) : '');
        } },
        xAxis: fit ? { type: 'value', min: 0, max: 100, name: 'offset in the segment (%)', nameLocation: 'middle', nameGap: 26,
                       axisLabel: { formatter: '{value} %' } }
                   : bytesAxis(0, max(map.segments.map(function (seg) { return seg.size; })),
                               { name: 'offset in the segment', nameLocation: 'middle', nameGap: 26 }),
        yAxis: { type: 'category', data: labels, inverse: true, axisTick: { show: false },
                 axisLabel: { fontSize: 10.5, fontFamily: 'ui-monospace, "DejaVu Sans Mono", monospace', interval: 0 } },
        dataZoom: zoomY,
        series: series
      };
    }
    function show() {
      var map = maps[current];
      var rows = map.segments.length;
      var height = 100 + Math.min(rows, 36) * 20;
      if (!chart) {
        chart = makeChart('segments', host, option(map));
        chart.getDom().style.height = height + 'px';
        chart.resize();
      } else {
        chart.getDom().style.height = height + 'px';
        chart.resize();
        chart.setOption(option(map), { notMerge: true });
      }
      caption.textContent = '';
      append(caption, [map.label + ': ', fmtCount(map.segments_total), ' segments, ', fmtBytes(map.reserved), ' reserved, ',
                       fmtBytes(map.live), ' live, ', fmtBytes(map.inactive), ' inactive; largest inactive block ',
                       fmtBytes(map.largest_inactive_block), '.']);
      if (map.kind === 'oom') {
        var o = ((report.trace || {}).oom || [])[map.oom];
        if (o) append(caption, [' Replayed backwards from the final state: the layout just before a request of ', fmtBytes(o.size),
                                ' failed (', o.verdict || 'unclear', ').']);
      }
      if (map.segments_shown < map.segments_total) {
        append(caption, [' Showing the ' + fmtCount(map.segments_shown) + ' largest segments; ' +
                         fmtCount(map.segments_total - map.segments_shown) + ' smaller ones (' + fmtBytes(map.bytes_hidden) + ') are not drawn.']);
      }
    }
    if (maps.length > 1) {
      var sel = h('select', { 'aria-label': 'Layout' }, maps.map(function (m, i) { return h('option', { value: i, selected: i === current }, m.label); }));
      sel.addEventListener('change', function () { current = Number(sel.value); show(); });
      append(controls, ['Layout ', sel]);
    }
    var absBtn = h('button', { type: 'button', class: 'on' }, 'Bytes');
    var fitBtn = h('button', { type: 'button' }, 'Fit each segment');
    absBtn.addEventListener('click', function () { fit = false; absBtn.className = 'on'; fitBtn.className = ''; show(); });
    fitBtn.addEventListener('click', function () { fit = true; fitBtn.className = 'on'; absBtn.className = ''; show(); });
    append(controls, ['Scale ', absBtn, fitBtn]);
    show();
  }

  // What the memory is: the known allocator's name (its note and knob on hover), the library
  // frame and the op below the site's line.
  function whatCell(x) {
    var parts = [];
    if (x.known_allocator) {
      parts.push(h('strong', { class: 'known', title: x.known_allocator.note + '; change: ' + x.known_allocator.knob },
                   x.known_allocator.name));
    }
    if (x.what) parts.push(h('div', { class: 'fn' }, x.what));
    if (x.what_op && x.what_op !== x.what) parts.push(h('div', { class: 'fn' }, x.what_op));
    // The allocations' tags (2026 snapshots): compiled region, user_metadata labels, annotate text.
    if (x.region) parts.push(h('div', { class: 'fn', 'data-tag': 'region' }, 'compiled region: ' + x.region));
    if ((x.labels || []).length) parts.push(h('div', { class: 'fn', 'data-tag': 'labels' }, 'label: ' + x.labels.join(', ')));
    if ((x.notes || []).length) parts.push(h('div', { class: 'fn', 'data-tag': 'notes' }, 'annotated: ' + x.notes.join('; ')));
    return parts;
  }

  // The kinds a site holds besides its own (other_kinds): under its badge, "also parameter 475 MiB".
  function kindCell(x) {
    var parts = [badge(x.category || 'unknown')];
    (x.other_kinds || []).forEach(function (o) {
      parts.push(h('div', { class: 'fn', 'data-other-kind': o.kind }, 'also ' + o.kind + ' ' + fmtBytes(o.bytes) + ' in ' + fmtCount(o.blocks) +
                   (o.blocks === 1 ? ' block' : ' blocks')));
    });
    return parts;
  }

  // A site is per device: the Device column shows when the snapshot has several.
  function sitesTable(sites, keyPrefix) {
    var max = sites.reduce(function (m, x) { return Math.max(m, x.bytes); }, 0) || 1;
    var many = (report.devices || []).length > 1;
    var headers = ['#', 'Site', 'Function', 'What', 'Category', 'Live bytes', 'Blocks', 'Share'];
    if (many) headers.splice(2, 0, 'Device');
    return table(headers, sites.map(function (x, i) {
      var k = keyPrefix + '.' + i + '.';
      var frames = (x.full_stack || []).length ? x.full_stack : (x.stack || []);
      var site = h('details', null, h('summary', null, h('span', { class: 'site', 'data-key': k + 'site' }, x.site)),
        frames.length ? h('ol', { class: 'stack' }, frames.map(function (f) { return h('li', null, f); }))
                      : h('p', { class: 'fn' }, 'no call stack recorded'));
      var device = many ? td(x.device === null || x.device === undefined ? '\u2014' : val(k + 'device', x.device, 'text')) : null;
      return h('tr', { 'data-site-row': i }, td(String(i + 1)), td(site), device, td(h('span', { class: 'fn' }, x.function || '')),
               td(whatCell(x)), td(kindCell(x)), td(val(k + 'bytes', x.bytes, 'bytes'), true),
               td(val(k + 'blocks', x.blocks, 'count'), true),
               td([val(k + 'percent', x.percent, 'percent'), h('div', { class: 'bar' }, h('span', { style: 'width:' + (100 * x.bytes / max).toFixed(1) + '%' }))], true));
    }), many ? [false, false, false, false, false, false, true, true, true] : [false, false, false, false, false, true, true, true]);
  }

  function renderSites() {
    var s = section('sites', 'Top sites', 'Live memory at the end of the snapshot by the code that allocated it. Click a site for its call stack.');
    var sites = report.top_sites || [];
    if (!sites.length) s.appendChild(h('p', { class: 'notice' }, 'No live allocations.'));
    else s.appendChild(sitesTable(sites, 'top_sites'));
    var peak = report.peak || {};
    if ((peak.top_sites || []).length) {
      s.appendChild(h('h3', null, 'Live at the peak (' + deviceName(peak.device) + ')'));
      s.appendChild(sitesTable(peak.top_sites, 'peak.top_sites'));
    }
  }

  function renderDiff() {
    var diff = report.diff;
    if (!diff) return;
    var s = section('diff', 'Growth between snapshots', 'The later snapshot compared with the earlier one (--diff): sites matched by file:line and function.');
    var td0 = diff.totals_delta || {};
    var keys = Object.keys(td0);
    s.appendChild(h('div', { class: 'stats' }, keys.map(function (k) {
      var count = k === 'segments' || k === 'blocks';
      return stat(k.replace(/_/g, ' '), 'diff.totals_delta.' + k, td0[k], count ? 'signed_count' : 'signed_bytes');
    })));
    var sites = diff.sites || [];
    if (!sites.length) { s.appendChild(h('p', { class: 'notice' }, 'No site changed.')); return; }
    var grew = sites.filter(function (x) { return x.delta_bytes > 0; }).slice(0, 15);
    var shrank = sites.filter(function (x) { return x.delta_bytes < 0; }).slice(-8);
    var shown = grew.concat(shrank).sort(function (a, b) { return a.delta_bytes - b.delta_bytes; });
    if (shown.length) {
      var chartHost = h('div');
      s.appendChild(chartHost);
      var chart = makeChart('diff', chartHost, {
        grid: { left: 12, right: 40, top: 10, bottom: 30, containLabel: true },
        tooltip: { trigger: 'item', formatter: function (p) {
          var x = shown[p.dataIndex];
          return escapeHtml(x.site) + '<br>' + escapeHtml(x.status) + ': ' + fmtBytes(x.bytes_before) + ' \u2192 ' + fmtBytes(x.bytes_after) +
                 ' (<b>' + fmtSignedBytes(x.delta_bytes) + '</b>)';
        } },
        xAxis: bytesAxis(Math.min(0, shown[0].delta_bytes), Math.max(0, shown[shown.length - 1].delta_bytes)),
        yAxis: { type: 'category', data: shown.map(function (x) { return shortSite(x.site); }), axisTick: { show: false },
                 axisLabel: { fontSize: 10.5, fontFamily: 'ui-monospace, "DejaVu Sans Mono", monospace' } },
        series: [{ type: 'bar', name: 'delta', barMaxWidth: 18,
                   data: shown.map(function (x) { return { value: x.delta_bytes, itemStyle: { color: x.delta_bytes > 0 ? '#c8372d' : '#2e7d4f' } }; }),
                   label: { show: true, position: 'right', formatter: function (p) { return fmtSignedBytes(p.value); }, fontSize: 10 } }]
      });
      chart.getDom().style.height = Math.max(180, 60 + shown.length * 24) + 'px';
      chart.resize();
    }
    s.appendChild(table(['Site', 'Status', 'Before', 'After', 'Delta', 'Blocks before', 'Blocks after', 'Delta blocks'],
      sites.slice(0, 50).map(function (x, i) {
        var k = 'diff.sites.' + i + '.';
        return h('tr', null, td(h('span', { class: 'site' }, x.site)), td(badge(x.status, x.status === 'new' || x.status === 'grown' ? 'problem' : x.status === 'same' ? 'neutral' : 'expected')),
                 td(val(k + 'bytes_before', x.bytes_before, 'bytes'), true), td(val(k + 'bytes_after', x.bytes_after, 'bytes'), true),
                 td(val(k + 'delta_bytes', x.delta_bytes, 'signed_bytes', x.delta_bytes > 0 ? 'pos' : x.delta_bytes < 0 ? 'neg' : null), true),
                 td(val(k + 'blocks_before', x.blocks_before, 'count'), true), td(val(k + 'blocks_after', x.blocks_after, 'count'), true),
                 td(val(k + 'delta_blocks', x.delta_blocks, 'signed_count'), true));
      }), [false, false, true, true, true, true, true, true]));
  }

  function renderRanks() {
    if (!report.ranks) return;
    var entries = Array.isArray(report.ranks) ? report.ranks : (report.ranks.ranks || []);
    var outlierList = report.outlier_ranks || (!Array.isArray(report.ranks) && report.ranks.outlier_ranks) || [];
    var outliers = {};
    outlierList.forEach(function (r) { outliers[r] = true; });
    var s = section('ranks', 'Ranks', 'One snapshot per rank: memory per rank, with the ranks whose peak or live memory stands out marked.');
    var ranksKey = Array.isArray(report.ranks) ? 'ranks' : 'ranks.ranks';
    var metrics = [['reserved', 'Reserved', '#9aa7c0'], ['allocated', 'Allocated', '#3566d6'], ['peak_allocated', 'Peak allocated', '#f29f3d']];
    makeChart('ranks', s, {
      legend: { top: 0 },
      grid: { left: 78, right: 20, top: 40, bottom: 40 },
      tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, formatter: function (ps) {
        var r = entries[ps[0].dataIndex];
        return 'rank ' + escapeHtml(r.rank) + (outliers[r.rank] ? ' <b style="color:#c8372d">outlier</b>' : '') + '<br>' +
               ps.map(function (p) { return p.marker + escapeHtml(p.seriesName) + ': <b>' + fmtBytes(p.value) + '</b>'; }).join('<br>');
      } },
      xAxis: { type: 'category', data: entries.map(function (r) { return 'rank ' + r.rank; }),
               axisLabel: { color: function (v, i) { return outliers[entries[i].rank] ? '#c8372d' : '#4a5263'; },
                            fontWeight: 600 } },
      yAxis: bytesAxis(0, max(entries.map(function (r) {
        return max(metrics.map(function (m) { return (r.totals || {})[m[0]] || 0; }));
      }))),
      series: metrics.map(function (m) {
        return { name: m[1], type: 'bar', color: m[2], barMaxWidth: 26,
                 data: entries.map(function (r) {
                   var v = (r.totals || {})[m[0]];
                   return { value: v === null || v === undefined ? 0 : v,
                            itemStyle: outliers[r.rank] ? { borderColor: '#c8372d', borderWidth: 2 } : undefined };
                 }) };
      })
    });
    s.appendChild(table(['Rank', 'Snapshot', 'Reserved', 'Allocated', 'Peak allocated', 'OOM events', 'Top site'], entries.map(function (r, i) {
      var k = ranksKey + '.' + i + '.';
      var t = r.totals || {};
      var top = (r.top_sites || [])[0];
      return h('tr', { class: outliers[r.rank] ? 'outlier' : null }, td([String(r.rank), outliers[r.rank] ? [' ', badge('outlier', 'problem')] : null]),
               td(h('span', { class: 'site' }, r.path || '')), td(val(k + 'totals.reserved', t.reserved, 'bytes'), true),
               td(val(k + 'totals.allocated', t.allocated, 'bytes'), true), td(val(k + 'totals.peak_allocated', t.peak_allocated, 'bytes'), true),
               td(val(k + 'oom_events', r.oom_events, 'count'), true), td(top ? h('span', { class: 'site' }, top.site) : '\u2014'));
    }), [false, false, true, true, true, true, false]));
  }

  function renderDetails() {
    var s = section('details', 'Details', 'Allocator pools, the trace window and the report\u2019s own consistency checks.');
    var grid = h('div', { class: 'grid2' });
    s.appendChild(grid);
    var trace = report.trace || {};
    var actions = trace.actions || {};
    grid.appendChild(h('div', null, h('h3', null, 'Trace'), table(['', 'Count'], [
      h('tr', null, td('events in the file'), td(val('trace.events', trace.events, 'count'), true)),
      h('tr', null, td('analyzed'), td(val('trace.analyzed', trace.analyzed, 'count'), true)),
      h('tr', null, td('dropped (--max-trace-events)'), td(val('trace.dropped', trace.dropped, 'count'), true)),
      h('tr', null, td('frees still pending'), td(val('trace.pending_free_requests', trace.pending_free_requests, 'count'), true))
    ].concat(Object.keys(actions).map(function (a) {
      return h('tr', null, td(h('code', null, a)), td(val('trace.actions.' + a, actions[a], 'count'), true));
    })), [false, true])));
    var inv = report.invariants || { ok: true, violations: [] };
    grid.appendChild(h('div', null, h('h3', null, 'Consistency checks'),
      h('p', null, inv.ok ? h('span', { class: 'ok-text' }, 'All invariants hold') : h('span', { class: 'bad-text' }, 'Invariant violations'),
        ': reserved = allocated + pending free + inactive per device, blocks tile their segments, site bytes add up to allocated.'),
      (inv.violations || []).length ? h('ul', null, inv.violations.map(function (v) { return h('li', null, v); })) : null,
      h('h3', null, 'Tolerated input'),
      h('p', { class: 'fn' }, 'Unknown keys: ' + (Object.keys((report.tolerated || {}).unknown_keys || {}).join(', ') || 'none') +
        '; unknown actions: ' + (Object.keys((report.tolerated || {}).unknown_actions || {}).join(', ') || 'none'))));
    var pools = report.pools || [];
    if (pools.length) {
      s.appendChild(h('h3', null, 'Pools (device, pool, stream)'));
      s.appendChild(table(['Device', 'Pool', 'Stream', 'Reserved', 'Allocated', 'Inactive', 'Largest inactive', 'Segments', 'With inactive'],
        pools.map(function (p, i) {
          var k = 'pools.' + i + '.';
          return h('tr', null, td(deviceName(p.device)), td(p.pool), td(String(p.stream)), td(val(k + 'reserved', p.reserved, 'bytes'), true),
                   td(val(k + 'allocated', p.allocated, 'bytes'), true), td(val(k + 'inactive', p.inactive, 'bytes'), true),
                   td(val(k + 'largest_inactive_block', p.largest_inactive_block, 'bytes'), true), td(val(k + 'segments', p.segments, 'count'), true),
                   td(val(k + 'segments_with_inactive', p.segments_with_inactive, 'count'), true));
        }), [false, false, false, true, true, true, true, true, true]));
    }
    renderMemoryPools(s);
  }

  // Reserved by memory pool (CUDA graphs, MemPools) and pinned host memory, when the snapshot has them.
  function renderMemoryPools(s) {
    var pools = report.memory_pools || [];
    if (pools.some(function (p) { return p.kind !== 'default'; })) {
      s.appendChild(h('h3', null, 'Memory pools (reserved by device and pool)'));
      s.appendChild(table(['Device', 'Pool', 'Reserved', 'Allocated', 'Inactive', 'Segments'], pools.map(function (p, i) {
        var k = 'memory_pools.' + i + '.';
        return h('tr', null, td(deviceName(p.device)), td(p.label), td(val(k + 'reserved', p.reserved, 'bytes'), true),
                 td(val(k + 'allocated', p.allocated, 'bytes'), true), td(val(k + 'inactive', p.inactive, 'bytes'), true),
                 td(val(k + 'segments', p.segments, 'count'), true));
      }), [false, false, true, true, true, true]));
      s.appendChild(h('p', { class: 'fn' }, 'A private pool\u2019s memory serves only requests made in that pool; the default pool cannot reuse it.'));
    }
    var host = report.host_memory;
    if (host) {
      s.appendChild(h('h3', null, 'Pinned host memory'));
      s.appendChild(table(['', 'Bytes'], [
        h('tr', null, td('reserved (host segments)'), td(val('host_memory.reserved', host.reserved, 'bytes'), true)),
        h('tr', null, td('allocated (live)'), td(val('host_memory.allocated', host.allocated, 'bytes'), true)),
        h('tr', null, td('inactive (cached)'), td(val('host_memory.inactive', host.inactive, 'bytes'), true)),
        h('tr', null, td('peak allocated (host trace)'), td(val('host_memory.peak_allocated', host.peak_allocated, 'bytes'), true))
      ], [false, true]));
    }
  }

  // ---- Memory budget: what the live memory is, at the end, the peak and each OOM of the main
  // device (report.budget), and the block sizes of its stack-less memory.
  function budgetLabel(b) { return b.moment === 'oom' ? 'before OOM ' + (b.oom + 1) : 'at the ' + b.moment; }
  function renderBudget() {
    var budgets = report.budget || [];
    var main = budgets.filter(function (b) { return b.main; })[0];
    if (!main) return;
    var mine = budgets.filter(function (b) { return b.device === main.device; });
    var s = section('budget', 'Memory budget', 'What the live memory of ' + deviceName(main.device) +
      ' is, by kind, at the end, at the peak and before each OOM (rows add up to the live bytes exactly).');
    var kinds = [];
    mine.forEach(function (b) { b.rows.forEach(function (r) { if (kinds.indexOf(r.kind) < 0) kinds.push(r.kind); }); });
    var series = kinds.map(function (kind) {
      return { name: kind.replace(/_/g, ' '), type: 'bar', stack: 'live', data: mine.map(function (b) {
        return b.rows.filter(function (r) { return r.kind === kind; }).reduce(function (t, r) { return t + r.bytes; }, 0);
      }) };
    });
    makeChart('budget', s, {
      tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: fmtBytes },
      legend: { top: 0 }, grid: { left: 110, right: 30, top: 40, bottom: 30 },
      yAxis: { type: 'category', data: mine.map(budgetLabel) },
      xAxis: { type: 'value', axisLabel: { formatter: fmtAxisBytes } }, series: series
    }, 'budget-chart');
    s.appendChild(table(['Moment', 'Kind', 'Provenance', 'Decided by', 'Bytes', 'Share', 'Blocks'], [].concat.apply([], mine.map(function (b) {
      var bi = budgets.indexOf(b);
      return b.rows.map(function (r, i) {
        var k = 'budget.' + bi + '.rows.' + i + '.';
        return h('tr', null, td(budgetLabel(b)), td(r.kind.replace(/_/g, ' ')), td(r.provenance.replace(/_/g, ' ')), td(r.source.replace(/_/g, ' ')),
                 td(val(k + 'bytes', r.bytes, 'bytes'), true), td(val(k + 'share', r.share, 'percent'), true), td(val(k + 'blocks', r.blocks, 'count'), true));
      });
    })), [false, false, false, false, true, true, true]));
    var sizes = main.stackless_sizes || [];
    if (!sizes.length) return;
    s.appendChild(h('h3', null, 'Stack-less memory ' + budgetLabel(main) + ', by block size'));
    makeChart('stackless_sizes', s, {
      tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, formatter: function (ps) {
        var g = sizes[ps[0].dataIndex]; return fmtCount(g.count) + ' \u00d7 ' + fmtBytes(g.size) + ' = ' + fmtBytes(g.count * g.size);
      } },
      grid: { left: 80, right: 30, top: 20, bottom: 40 },
      xAxis: { type: 'category', data: sizes.map(function (g) { return fmtCount(g.count) + ' \u00d7 ' + fmtBytes(g.size); }) },
      yAxis: { type: 'value', axisLabel: { formatter: fmtAxisBytes } },
      series: [{ name: 'bytes', type: 'bar', data: sizes.map(function (g) { return g.count * g.size; }) }]
    }, 'budget-chart');
    if (main.stackless_sizes_not_listed) s.appendChild(h('p', { class: 'fn' }, fmtCount(main.stackless_sizes_not_listed) + ' more sizes not listed.'));
    s.appendChild(h('ul', { class: 'plain' }, (main.evidence || []).map(function (e) { return h('li', null, e); })));
  }

  function renderFooter() {
    var f = document.getElementById('footer');
    append(f, ['Generated by memsnap \u00b7 ', report.schema || '', plots ? ' \u00b7 charts drawn offline by ' + plots.chart_library + ', inlined in this file' : '',
               ' \u00b7 the data behind this page is the JSON report, in the memsnap-data element of its source.']);
  }

  guarded('source', renderSource);
  guarded('overview', renderOverview);
  guarded('findings', renderFindings);
  guarded('memory budget', renderBudget);
  if (plots) {
    guarded('memory over time', renderTimeline);
    guarded('live memory by site', renderBySite);
    guarded('segment map', renderSegments);
  }
  guarded('top sites', renderSites);
  guarded('diff', renderDiff);
  guarded('ranks', renderRanks);
  guarded('details', renderDetails);
  guarded('footer', renderFooter);
  state.renderMs = performance.now() - started;
  state.readyAt = performance.now();  // milliseconds since the navigation started
  state.ready = true;
  document.body.setAttribute('data-ready', state.errors.length ? 'error' : 'true');
})();
