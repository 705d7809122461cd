// The HTML report's script (analysis/html_report.cc embeds it at build time: cmake/EmbedText.cmake): draws
// #timeline from #ts-timeline and #plots from #ts-plots. Every input is checked; an error anywhere is recorded
// (data-errors, shown on the page) and the rest still drawn.
"use strict";
(function () {
  var errors = [];
  function fail(where, e) {
    errors.push(where + ": " + (e && e.message ? e.message : String(e)));
    document.body.setAttribute("data-errors", errors.join(" | "));
  }
  window.addEventListener("error", function (ev) { fail("script", ev.message || ev.error); });
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function fmtTime(us) {
    if (Math.abs(us) >= 1e6) return (us / 1e6).toFixed(us >= 1e7 ? 1 : 2) + " s";
    if (Math.abs(us) >= 1e3) return (us / 1e3).toFixed(us >= 1e4 ? 1 : 2) + " ms";
    return us.toFixed(0) + " µs";
  }
  function niceStep(range, ticks) {
    var raw = range / Math.max(1, ticks), p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  var OP_COLORS = {
    ncclAllReduce: "#4e79a7", ncclReduce: "#76b7b2", ncclBroadcast: "#59a14f", ncclBcast: "#59a14f",
    ncclReduceScatter: "#edc948", ncclAllGather: "#f28e2b", ncclAlltoAll: "#b07aa1", ncclGather: "#ff9da7",
    ncclScatter: "#9c755f", ncclSend: "#8cd17d", ncclRecv: "#86bcb6", ncclGroupStart: "#bab0ac",
    ncclGroupEnd: "#bab0ac", ncclCommInitRank: "#79706e", ncclCommInitRankConfig: "#79706e",
    ncclCommDestroy: "#79706e", ncclCommFinalize: "#79706e", ncclGetUniqueId: "#79706e"
  };
  var EXTRA = ["#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d", "#f1ce63", "#499894", "#e15759", "#fabfd2", "#b6992d"];
  var SERIES_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#9c755f", "#ff9da7",
                       "#1b5e20", "#6a3d9a", "#17becf", "#7f7f7f"];
  function opColor(name, cat) {
    if (OP_COLORS.hasOwnProperty(name)) return OP_COLORS[name];
    if (cat === "launch") return "#a5acb3";
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return EXTRA[h % EXTRA.length];
  }

  // ---- Timeline ----
  var instantsGlobal = [];
  function drawTimeline() {
    var host = document.getElementById("timeline");
    var trace = data("ts-timeline");
    var events = trace && Array.isArray(trace.traceEvents) ? trace.traceEvents : (Array.isArray(trace) ? trace : []);
    var procs = {}, order = [];
    function proc(pid) {
      var key = String(pid);
      if (!procs.hasOwnProperty(key)) {
        procs[key] = {pid: pid, name: null, sort: null, tracks: {}, trackOrder: [], instants: []};
        order.push(key);
      }
      return procs[key];
    }
    function track(p, tid) {
      var key = String(tid);
      if (!p.tracks.hasOwnProperty(key)) {
        p.tracks[key] = {tid: tid, name: null, sort: null, slices: [], instants: []};
        p.trackOrder.push(key);
      }
      return p.tracks[key];
    }
    var t0 = Infinity, t1 = -Infinity, slices = 0, skipped = 0, names = {};
    events.forEach(function (e) {
      if (!e || typeof e !== "object" || typeof e.ph !== "string") { skipped++; return; }
      var pid = (typeof e.pid === "number" || typeof e.pid === "string") ? e.pid : "?";
      var args = e.args && typeof e.args === "object" ? e.args : {};
      if (e.ph === "M") {
        var p = proc(pid);
        if (e.name === "process_name" && args.name != null) p.name = String(args.name);
        else if (e.name === "process_sort_index" && num(args.sort_index) !== null) p.sort = args.sort_index;
        else if (e.name === "thread_name" && args.name != null)
          track(p, e.tid != null ? e.tid : 0).name = String(args.name);
        else if (e.name === "thread_sort_index" && num(args.sort_index) !== null)
          track(p, e.tid != null ? e.tid : 0).sort = args.sort_index;
        return;
      }
      var ts = num(e.ts);
      if (ts === null) { skipped++; return; }
      var name = e.name != null ? String(e.name) : "?";
      if (e.ph === "X" || e.ph === "B") {
        var dur = num(e.dur);
        if (dur === null || dur < 0) dur = 0;
        var pending = typeof args.result === "string" && args.result.indexOf("pending") === 0;
        track(proc(pid), e.tid != null ? e.tid : 0).slices.push(
            {ts: ts, dur: dur, name: name, cat: String(e.cat || ""), args: args, pending: pending});
        names[name] = opColor(name, e.cat);
        slices++;
        t0 = Math.min(t0, ts); t1 = Math.max(t1, ts + dur);
      } else if (e.ph === "i" || e.ph === "I" || e.ph === "n") {
        var inst = {ts: ts, name: name, cat: String(e.cat || ""), args: args, scope: e.s};
        if (e.s === "g") instantsGlobal.push(inst);
        else if (e.s === "p" || e.tid == null) proc(pid).instants.push(inst);
        else track(proc(pid), e.tid).instants.push(inst);
        t0 = Math.min(t0, ts); t1 = Math.max(t1, ts);
      } else {
        skipped++;
      }
    });
    var summary = document.getElementById("timeline-note");
    if (!isFinite(t0)) {
      host.innerHTML = "<p class=\"note\">No timeline events" +
          (trace && trace.otherData && trace.otherData.note ? ": " + esc(trace.otherData.note) : "") +
          " (the flight recorders hold no call, or this page was written without them).</p>";
      host.setAttribute("data-slices", "0");
      return;
    }
    if (t1 <= t0) t1 = t0 + 1;
    order.sort(function (a, b) {
      var pa = procs[a], pb = procs[b];
      var sa = pa.sort !== null ? pa.sort : (typeof pa.pid === "number" ? pa.pid : 1e12);
      var sb = pb.sort !== null ? pb.sort : (typeof pb.pid === "number" ? pb.pid : 1e12);
      return sa - sb || (a < b ? -1 : a > b ? 1 : 0);
    });
    var labelW = 260, width = Math.max(600, Math.min(1400, host.clientWidth || 1200)), plotW = width - labelW - 40;
    var rowH = 18, headH = 20, axisH = 24, y = axisH, rows = [];
    order.forEach(function (key) {
      var p = procs[key];
      var tracks = p.trackOrder.map(function (k) { return p.tracks[k]; })
          .filter(function (t) { return t.slices.length || t.instants.length; });
      if (!tracks.length && !p.instants.length) return;
      tracks.sort(function (a, b) {
        var sa = a.sort !== null ? a.sort : 1e12, sb = b.sort !== null ? b.sort : 1e12;
        return sa - sb || String(a.tid).localeCompare(String(b.tid));
      });
      rows.push({head: true, p: p, y: y});
      y += headH;
      tracks.forEach(function (t) { rows.push({head: false, p: p, t: t, y: y}); y += rowH; });
      if (!tracks.length) y += rowH;
    });
    var height = y + 8;
    var legend = Object.keys(names).sort().map(function (n) {
      return "<span><i style=\"background:" + names[n] + "\"></i>" + esc(n) + "</span>";
    });
    legend.push("<span><i style=\"background:#fff;border:2px solid #c62828\"></i>never returned</span>");
    legend.push("<span><i style=\"background:#c62828;transform:rotate(45deg);width:9px;height:9px\"></i>" +
                "verdict, first inf/nan, CUDA error, stop</span>");
    if (summary) {
      summary.textContent = slices + " slices on " + rows.filter(function (r) { return !r.head; }).length +
          " tracks of " + rows.filter(function (r) { return r.head; }).length + " processes over " +
          fmtTime(t1 - t0) + (skipped ? "; " + skipped + " events not understood, skipped" : "") +
          ". Hover a slice or a marker for its details; calls thinner than a pixel are drawn merged.";
    }
    render(t0, t1);

    // Draws the window [v0, v1] of the run; dragging across it draws the part dragged over.
    function render(v0, v1) {
      function X(ts) { return labelW + (ts - v0) / (v1 - v0) * plotW; }
      function inView(ts) { return ts >= v0 && ts <= v1; }
      var out = [], drawn = 0, pendingDrawn = 0, instantsDrawn = 0;
      out.push("<svg id=\"timeline-svg\" width=\"" + width + "\" height=\"" + height + "\" viewBox=\"0 0 " + width +
               " " + height + "\">");
      var step = niceStep(v1 - v0, 8);
      out.push("<g class=\"axis\">");
      for (var tick = Math.ceil((v0 - t0) / step) * step; tick <= v1 - t0 + 1e-9; tick += step) {
        var tx = X(t0 + tick);
        out.push("<line class=\"grid\" x1=\"" + tx + "\" x2=\"" + tx + "\" y1=\"" + (axisH - 4) + "\" y2=\"" + height +
                 "\"/><text x=\"" + tx + "\" y=\"" + (axisH - 8) + "\" text-anchor=\"middle\">" + esc(fmtTime(tick)) +
                 "</text>");
      }
      out.push("</g>");
      rows.forEach(function (r) {
        if (r.head) {
          var label = r.p.name !== null ? r.p.name : "pid " + r.p.pid;
          out.push("<rect x=\"0\" y=\"" + r.y + "\" width=\"" + width + "\" height=\"" + headH +
                   "\" fill=\"#eef2f6\"/><text class=\"rankhead\" x=\"6\" y=\"" + (r.y + 14) + "\">" + esc(label) +
                   "</text>");
          r.p.instants.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
            out.push(instantMark(i, X(i.ts), r.y + headH / 2));
          });
          return;
        }
        var t = r.t, tname = t.name !== null ? t.name : "track " + t.tid;
        var shown = tname.length > 40 ? tname.slice(0, 39) + "…" : tname;
        out.push("<text x=\"14\" y=\"" + (r.y + 13) + "\">" + esc(shown) +
                 "<title>" + esc(tname) + "</title></text>");
        t.slices.sort(function (a, b) { return a.ts - b.ts; });
        // Slices thinner than a pixel are merged per track: what is drawn is bounded by the width, not the calls.
        var bucket = null;
        function flush() {
          if (!bucket) return;
          var w = Math.max(1, bucket.x1 - bucket.x0);
          out.push("<rect class=\"slice\" x=\"" + bucket.x0.toFixed(2) + "\" y=\"" + (r.y + 2) + "\" width=\"" +
                   w.toFixed(2) + "\" height=\"" + (rowH - 4) + "\" fill=\"" + bucket.color + "\"><title>" +
                   esc(bucket.n > 1 ? bucket.n + " calls, " + bucket.first + " … " + bucket.last : bucket.title) +
                   "</title></rect>");
          drawn++;
          bucket = null;
        }
        t.slices.forEach(function (s) {
          if (s.ts > v1 || s.ts + s.dur < v0) return;
          var x0 = Math.max(labelW - 1, X(s.ts)), x1 = Math.min(labelW + plotW + 1, X(s.ts + s.dur));
          if (s.pending) {
            flush();
            out.push("<rect class=\"slice pending\" x=\"" + x0.toFixed(2) + "\" y=\"" + (r.y + 2) + "\" width=\"" +
                     Math.max(2, x1 - x0).toFixed(2) + "\" height=\"" + (rowH - 4) + "\" fill=\"" +
                     opColor(s.name, s.cat) + "\" fill-opacity=\"0.55\"><title>" + esc(sliceTitle(s)) +
                     "</title></rect>");
            var atEnd = x1 > width - 220;
            out.push("<text x=\"" + (atEnd ? x1 - 4 : x1 + 4).toFixed(2) + "\" y=\"" + (r.y + 13) +
                     "\" fill=\"#c62828\" text-anchor=\"" + (atEnd ? "end" : "start") +
                     "\" font-weight=\"700\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">" +
                     esc("never returned: " + s.name + (s.args.seq != null ? " #" + s.args.seq : "")) + "</text>");
            drawn++;
            pendingDrawn++;
            return;
          }
          var color = opColor(s.name, s.cat);
          // Whatever their ops, calls within one pixel are one mark (coloured as the first; its title names them).
          if (bucket && x0 < bucket.x0 + 1 && x1 - x0 < 1) {
            bucket.x1 = Math.max(bucket.x1, x1);
            bucket.n++;
            bucket.last = s.name;
            return;
          }
          flush();
          bucket = {x0: x0, x1: x1, color: color, n: 1, first: s.name, last: s.name, title: sliceTitle(s)};
          if (x1 - x0 >= 1) flush();
        });
        flush();
        t.instants.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
          out.push(instantMark(i, X(i.ts), r.y + rowH / 2));
        });
      });
      instantsGlobal.filter(function (i) { return inView(i.ts); }).forEach(function (i) {
        var x = X(i.ts);
        out.push("<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + axisH + "\" y2=\"" + height +
                 "\" stroke=\"#c62828\" stroke-dasharray=\"4 3\"/>" + instantMark(i, x, axisH + 4));
      });
      out.push("</svg>");
      function sliceTitle(s) {
        var lines = [s.name + "  " + fmtTime(s.ts - t0) +
                     (s.pending ? "  never returned" : "  took " + fmtTime(s.dur))];
        Object.keys(s.args).forEach(function (k) {
          var v = s.args[k];
          lines.push(k + ": " + (typeof v === "object" ? JSON.stringify(v) : String(v)));
        });
        return lines.join("\n");
      }
      function instantMark(i, x, cy) {
        instantsDrawn++;
        var lines = [i.name + " (" + i.cat + ")  " + fmtTime(i.ts - t0)];
        Object.keys(i.args).forEach(function (k) {
          var v = i.args[k];
          lines.push(k + ": " + (typeof v === "object" ? JSON.stringify(v) : String(v)));
        });
        return "<path class=\"instant\" d=\"M" + x.toFixed(2) + " " + (cy - 7) + " l6 7 l-6 7 l-6 -7 z\"><title>" +
               esc(lines.join("\n")) + "</title></path>";
      }
      var whole = v0 <= t0 && v1 >= t1;
      host.innerHTML = "<div class=\"legend\">" + legend.join("") + "</div><div class=\"zoom\">" +
          "<button type=\"button\" data-zoom=\"all\">whole run</button><button type=\"button\" data-zoom=\"end\">" +
          "the end (last 5 %)</button><span class=\"note\">" +
          (whole ? "the whole run" : esc(fmtTime(v0 - t0) + " to " + fmtTime(v1 - t0))) +
          "; drag across the bars to zoom in</span></div>" + out.join("");
      host.setAttribute("data-slices", String(drawn));
      host.setAttribute("data-pending", String(pendingDrawn));
      host.setAttribute("data-instants", String(instantsDrawn));
      host.querySelector("[data-zoom=all]").onclick = function () { render(t0, t1); };
      host.querySelector("[data-zoom=end]").onclick = function () { render(t1 - (t1 - t0) * 0.05, t1); };
      var svg = document.getElementById("timeline-svg"), band = null, from = 0;
      function at(ev) {
        var box = svg.getBoundingClientRect();
        return Math.min(labelW + plotW, Math.max(labelW, (ev.clientX - box.left) * width / box.width));
      }
      svg.addEventListener("mousedown", function (ev) {
        from = at(ev);
        band = document.createElementNS(svg.namespaceURI, "rect");
        band.setAttribute("y", "0");
        band.setAttribute("height", String(height));
        band.setAttribute("fill", "rgba(66,133,244,0.18)");
        band.setAttribute("x", String(from));
        band.setAttribute("width", "0");
        svg.appendChild(band);
        ev.preventDefault();
      });
      svg.addEventListener("mousemove", function (ev) {
        if (!band) return;
        var x = at(ev);
        band.setAttribute("x", String(Math.min(from, x)));
        band.setAttribute("width", String(Math.abs(x - from)));
      });
      function finish(ev) {
        if (!band) return;
        var a = Math.min(from, at(ev)), b = Math.max(from, at(ev));
        band = null;
        if (b - a < 4) { render(v0, v1); return; }
        var scale = (v1 - v0) / plotW;
        render(v0 + (a - labelW) * scale, v0 + (b - labelW) * scale);
      }
      svg.addEventListener("mouseup", finish);
      svg.addEventListener("mouseleave", finish);
    }
  }

  // ---- Plots ----
  function drawPlot(plot) {
    var series = Array.isArray(plot.series) ? plot.series : [];
    var W = 680, H = 300, L = 64, R = 12, T = 12, B = 40, pw = W - L - R, ph = H - T - B;
    var xs = [], ymin = Infinity, ymax = -Infinity;
    series.forEach(function (s) {
      (Array.isArray(s.points) ? s.points : []).forEach(function (p) {
        if (!Array.isArray(p) || num(p[0]) === null) return;
        xs.push(p[0]);
        var v = num(p[1]);
        if (v !== null && v > 0) { ymin = Math.min(ymin, v); ymax = Math.max(ymax, v); }
      });
    });
    if (!xs.length) return "<p class=\"note\">No tensor values in " + esc(plot.source || "?") + ".</p>";
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var pad = Math.max(0.5, (x1 - x0) * 0.03);
    x0 -= pad;
    x1 += pad;
    if (!isFinite(ymin)) { ymin = 1e-3; ymax = 1; }
    var lo = Math.floor(Math.log10(ymin)), hi = Math.ceil(Math.log10(ymax));
    if (hi <= lo) hi = lo + 1;
    var topBand = 16;  // inf/nan values are drawn in a band above the finite range
    function X(x) { return L + (x - x0) / (x1 - x0) * pw; }
    function Y(v) {
      if (typeof v !== "number" || !(v > 0)) return v === 0 ? T + ph : T + topBand / 2;
      return T + topBand + 8 + (1 - (Math.log10(v) - lo) / (hi - lo)) * (ph - topBand - 8);
    }
    var o = ["<svg class=\"plot-svg\" width=\"100%\" viewBox=\"0 0 " + W + " " + H + "\">"];
    o.push("<rect class=\"nonfinite-band\" x=\"" + L + "\" y=\"" + T + "\" width=\"" + pw + "\" height=\"" + topBand +
           "\"/><text x=\"" + (L - 6) + "\" y=\"" + (T + 12) + "\" text-anchor=\"end\" class=\"nonfinite-mark\">" +
           "inf/nan</text>");
    (Array.isArray(plot.nonfinite_x) ? plot.nonfinite_x : []).forEach(function (x) {
      if (num(x) === null) return;
      o.push("<line x1=\"" + X(x) + "\" x2=\"" + X(x) + "\" y1=\"" + T + "\" y2=\"" + (T + ph) +
             "\" stroke=\"#c62828\" stroke-opacity=\"0.35\" stroke-width=\"6\"><title>inf/nan at " +
             esc(plot.x_label) + " " + x + "</title></line>");
    });
    var decades = hi - lo, everyDecade = Math.max(1, Math.ceil(decades / 8));
    for (var e = lo; e <= hi; e++) {
      [1, 2, 5].forEach(function (m) {
        if (m !== 1 && (decades > 3 || e === hi)) return;
        if (m === 1 && (e - lo) % everyDecade !== 0) return;
        var gy = Y(m * Math.pow(10, e));
        o.push("<line class=\"grid\" x1=\"" + L + "\" x2=\"" + (L + pw) + "\" y1=\"" + gy + "\" y2=\"" + gy +
               "\"/><text x=\"" + (L - 6) + "\" y=\"" + (gy + 4) + "\" text-anchor=\"end\">" + m + "e" + e + "</text>");
      });
    }
    var xstep = Math.max(1, niceStep(x1 - x0 - 2 * pad, 8));
    for (var xt = Math.ceil(x0 / xstep) * xstep; xt <= x1; xt += xstep) {
      o.push("<line class=\"grid\" x1=\"" + X(xt) + "\" x2=\"" + X(xt) + "\" y1=\"" + (T + ph) + "\" y2=\"" +
             (T + ph + 4) + "\" stroke=\"#8c959f\"/><text x=\"" + X(xt) + "\" y=\"" + (T + ph + 16) +
             "\" text-anchor=\"middle\">" + xt + "</text>");
    }
    o.push("<text x=\"" + (L + pw / 2) + "\" y=\"" + (H - 6) + "\" text-anchor=\"middle\">" + esc(plot.x_label) +
           "</text><text x=\"12\" y=\"" + (T + ph / 2) + "\" transform=\"rotate(-90 12 " + (T + ph / 2) +
           ")\" text-anchor=\"middle\">abs max (log)</text>");
    o.push("<rect x=\"" + L + "\" y=\"" + T + "\" width=\"" + pw + "\" height=\"" + ph +
           "\" fill=\"none\" stroke=\"#8c959f\"/>");
    var legend = [], points = 0, xnames = Array.isArray(plot.x_names) ? plot.x_names : [];
    series.forEach(function (s, k) {
      var color = SERIES_COLORS[k % SERIES_COLORS.length];
      var pts = (Array.isArray(s.points) ? s.points : []).filter(function (p) {
        return Array.isArray(p) && num(p[0]) !== null;
      });
      var path = "", pen = false;
      pts.forEach(function (p) {
        var v = num(p[1]);
        if (v === null) { pen = false; return; }
        path += (pen ? " L" : " M") + X(p[0]).toFixed(2) + " " + Y(v).toFixed(2);
        pen = true;
      });
      if (path) o.push("<path d=\"" + path + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>");
      pts.forEach(function (p) {
        var v = num(p[1]), label = s.label + ", " + plot.x_label + " " + p[0] +
            (xnames[p[0] - 1] ? " (" + xnames[p[0] - 1] + ")" : "") + ": " +
            (v === null ? String(p[1]) : v.toExponential(2));
        if (v === null) {
          o.push("<text class=\"nonfinite-mark point\" x=\"" + X(p[0]) + "\" y=\"" + (T + 12) +
                 "\" text-anchor=\"middle\">✕<title>" + esc(label) + "</title></text>");
        } else if (pts.length <= 400) {  // a long series is its line alone
          o.push("<circle class=\"point\" cx=\"" + X(p[0]).toFixed(2) + "\" cy=\"" + Y(v).toFixed(2) +
                 "\" r=\"3\" fill=\"" + color + "\"><title>" + esc(label) + "</title></circle>");
        }
        points++;
      });
      legend.push("<span><i style=\"background:" + color + "\"></i>" + esc(s.label) +
                  (s.nonfinite ? " <b style=\"color:#c62828\">inf/nan</b>" : "") + "</span>");
    });
    o.push("</svg>");
    return "<div data-points=\"" + points + "\">" + o.join("") + "</div><div class=\"legend\">" + legend.join("") +
           "</div>";
  }
  function drawPlots() {
    var host = document.getElementById("plots");
    var plots = data("ts-plots");
    if (!Array.isArray(plots) || !plots.length) {
      host.innerHTML = "<p class=\"note\">No watched tensors: the run has no trace-rank&lt;R&gt;.jsonl " +
          "(TRAINSCOPE_TRACE_BATCHES) and no nonfinite-rank&lt;R&gt; report.</p>";
      return;
    }
    host.innerHTML = plots.map(function (plot, k) {
      var html;
      try { html = drawPlot(plot); } catch (e) { fail("plot " + k, e); html = "<p class=\"errors\">not drawn</p>"; }
      return "<div class=\"plot\"><h3>rank " + esc(plot.rank) + " <span class=\"note\">" + esc(plot.source || "") +
          "</span></h3>" + html + (plot.note ? "<p class=\"note\">" + esc(plot.note) + "</p>" : "") + "</div>";
    }).join("");
  }

  try { drawTimeline(); } catch (e) { fail("timeline", e); }
  try { drawPlots(); } catch (e) { fail("plots", e); }
  if (errors.length) {
    var box = document.getElementById("page-errors");
    box.textContent = "This page could not draw everything: " + errors.join(" | ");
  }
  document.body.setAttribute("data-rendered", errors.length ? "errors" : "ok");
})();
