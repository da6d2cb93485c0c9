// Views shared by the live dashboard (dashboard.js) and the replay report (report.js).
// Each draws plain data into a container element. Every value reaches the page as text
// (textContent, SVG attributes), never as markup: job names come from users.
"use strict";

const SWViews = (() => {
  const SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "onclick" || k === "onchange" || k === "oninput" || k === "onsubmit") node[k] = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  // a stable, well-spread colour per job id
  function color(jobId) {
    const hue = (Number(jobId) * 137.508) % 360;
    return `hsl(${hue.toFixed(1)}, 62%, ${48 + (Number(jobId) % 3) * 8}%)`;
  }

  function duration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "—";
    const sign = s < 0 ? "−" : "";
    s = Math.abs(s);
    if (s < 60) return `${sign}${s.toFixed(s < 10 ? 1 : 0)} s`;
    if (s < 3600) return `${sign}${Math.floor(s / 60)} m ${String(Math.round(s % 60)).padStart(2, "0")} s`;
    return `${sign}${Math.floor(s / 3600)} h ${String(Math.round((s % 3600) / 60)).padStart(2, "0")} m`;
  }

  function num(x, digits = 3) {
    if (x === null || x === undefined || !isFinite(x)) return "—";
    return Number(x).toPrecision(digits).replace(/\.?0+$/, (m) => (m.startsWith(".") ? "" : m));
  }

  function percent(x) {
    return x === null || x === undefined || !isFinite(x) ? "—" : `${(100 * x).toFixed(1)} %`;
  }

  // "3–6, 9" from [3, 4, 5, 6, 9]
  function ranges(list) {
    if (!list || !list.length) return "—";
    const out = [];
    let start = list[0], prev = list[0];
    for (const x of list.slice(1).concat([null])) {
      if (x !== null && x === prev + 1) { prev = x; continue; }
      out.push(start === prev ? `${start}` : `${start}–${prev}`);
      start = prev = x;
    }
    return out.join(", ");
  }

  const RUNNING_CODES = new Set(["fairness", "plan", "kept", "work_conservation", "allocated", "selected"]);

  function badge(code) {
    return el("span", { class: `badge ${RUNNING_CODES.has(code) ? "run" : "wait"} code-${code}`, text: code || "—" });
  }

  // A sortable table. columns: [{key, label, value(row) -> sortable, render(row) -> text|Node}]
  function table(container, rows, columns, opts = {}) {
    const sortKey = opts.sortKey, dir = opts.sortDir === "desc" ? -1 : 1;
    const col = columns.find((c) => c.key === sortKey);
    const sorted = col ? rows.slice().sort((a, b) => {
      const x = col.value ? col.value(a) : a[col.key], y = col.value ? col.value(b) : b[col.key];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    }) : rows;
    const head = el("tr", {}, ...columns.map((c) => el("th", {
      "data-sort": c.key, class: c.key === sortKey ? `sorted ${dir < 0 ? "desc" : "asc"}` : "",
      title: "sort", onclick: opts.onSort ? () => opts.onSort(c.key) : null, text: c.label,
    })));
    const body = el("tbody");
    for (const row of sorted) {
      const tr = el("tr", {
        "data-job": row.job_id, class: opts.selected !== undefined && row.job_id === opts.selected ? "selected" : "",
        onclick: opts.onSelect ? () => opts.onSelect(row.job_id) : null,
      }, ...columns.map((c) => {
        const v = c.render ? c.render(row) : row[c.key];
        return el("td", { class: c.cls || "" }, v instanceof Node ? v : document.createTextNode(v ?? "—"));
      }));
      body.append(tr);
    }
    container.replaceChildren(el("table", { class: opts.cls || "grid" }, el("thead", {}, head), body));
  }

  // The cluster: one box per node, one cell per GPU, coloured by the job holding it.
  function cluster(container, nodes, placement) {
    const holder = {};
    for (const [job, gpus] of Object.entries(placement || {})) for (const g of gpus) holder[g] = Number(job);
    container.replaceChildren(...nodes.map((node) => el("div", { class: "node", "data-node": node.name },
      el("div", { class: "node-name", text: node.name }),
      el("div", { class: "gpus" }, ...node.gpu_ids.map((g) => {
        const job = holder[g];
        const cell = el("div", {
          class: job === undefined ? "gpu idle" : "gpu busy", "data-gpu": g, "data-job": job,
          title: job === undefined ? `GPU ${g}: idle` : `GPU ${g}: job ${job}`,
        }, el("span", { class: "gpu-id", text: `GPU ${g}` }), el("span", { class: "gpu-job", text: job === undefined ? "idle" : `job ${job}` }));
        if (job !== undefined) cell.style.background = color(job);
        return cell;
      })))));
  }

  // Gantt of leases per GPU over rounds: rounds = [{round_index, placement: {job: [gpus]}, preempted: [jobs]}]
  function timeline(container, rounds, numGpus, opts = {}) {
    const gpus = Math.max(numGpus || 0, ...rounds.flatMap((r) => Object.values(r.placement).flat().map((g) => g + 1)), 1);
    const cw = Math.max(4, Math.min(24, Math.floor((opts.width || 900) / Math.max(rounds.length, 1))));
    const rh = Math.max(6, Math.min(18, Math.floor(360 / gpus)));
    const left = 52, top = 8, width = Math.max(left + cw * rounds.length + 8, 220), height = top + rh * gpus + 28;
    const root = svg("svg", { class: "timeline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "leases per GPU and round" });
    for (let g = 0; g < gpus; g++) {
      root.append(svg("text", { x: left - 6, y: top + g * rh + rh * 0.75, "text-anchor": "end", class: "axis" }, `GPU ${g}`));
    }
    rounds.forEach((r, i) => {
      const x = left + i * cw;
      for (const [job, ids] of Object.entries(r.placement)) {
        for (const g of ids) {
          const rect = svg("rect", { x, y: top + g * rh, width: cw - 1, height: rh - 1, fill: color(job), class: "lease",
            "data-job": job, "data-round": r.round_index, "data-gpu": g });
          rect.append(svg("title", {}, `round ${r.round_index}, GPU ${g}: job ${job}`));
          if (opts.onSelect) rect.addEventListener("click", () => opts.onSelect(Number(job)));
          root.append(rect);
        }
      }
      const prev = i > 0 ? rounds[i - 1].placement : {};
      for (const job of r.preempted || []) {
        const ids = prev[job] || [];
        const g = ids.length ? Math.min(...ids) : 0;
        const y = top + g * rh;
        const mark = svg("path", { d: `M${x} ${y} l${Math.max(cw, 6)} 0 l${-Math.max(cw, 6) / 2} ${Math.max(rh, 8)} z`,
          class: "preemption", "data-job": job, "data-round": r.round_index });
        mark.append(svg("title", {}, `round ${r.round_index}: job ${job} preempted`));
        if (opts.onSelect) mark.addEventListener("click", () => opts.onSelect(Number(job)));
        root.append(mark);
      }
      if (i % Math.max(1, Math.ceil(40 / cw)) === 0) {
        root.append(svg("text", { x, y: height - 12, class: "axis" }, String(r.round_index)));
      }
    });
    root.append(svg("text", { x: left, y: height - 1, class: "axis" }, "round →  (▼ preemption)"));
    container.replaceChildren(root);
  }

  // The market's reasons of one job, one row per round: [{round_index, code, text, running,
  // priority, allocation, target_finish_s, predicted_remaining_s, planned_rounds, deadline_round, path}]
  function reasons(container, jobId, rows, opts = {}) {
    const last = rows.length ? rows[rows.length - 1] : null;
    const formatTime = opts.formatTime || duration;
    const facts = last ? el("dl", { class: "facts" },
      el("dt", { text: "finish-time target" }), el("dd", { text: last.target_finish_s != null ? formatTime(last.target_finish_s) : "—" }),
      el("dt", { text: "priority" }), el("dd", { text: num(last.priority) }),
      el("dt", { text: "rounds planned in the window" }), el("dd", { text: ranges(last.planned_rounds) }),
      el("dt", { text: "fairness deadline round" }), el("dd", { text: last.deadline_round ?? "—" }),
      el("dt", { text: "plan path" }), el("dd", { text: last.path || "—" }),
    ) : el("p", { text: "No round has considered this job yet." });
    const body = rows.slice().reverse().map((r) => el("tr", { "data-round": r.round_index },
      el("td", { text: r.round_index }), el("td", {}, badge(r.code)), el("td", { class: "why", text: r.text }),
      el("td", { text: num(r.priority) }), el("td", { text: r.allocation != null ? num(r.allocation) : "—" }),
      el("td", { text: ranges(r.planned_rounds) }),
      el("td", { text: r.predicted_remaining_s != null ? duration(r.predicted_remaining_s) : "—" })));
    container.replaceChildren(
      el("h3", { text: `Job ${jobId}: the market's reasons` }), facts,
      el("table", { class: "grid reasons" },
        el("thead", {}, el("tr", {}, ...["round", "decision", "why", "priority", "x", "planned rounds", "predicted remaining"]
          .map((h) => el("th", { text: h })))),
        el("tbody", {}, ...body)));
  }

  // Empirical CDFs of finish-time fairness, one line per named series: {name: [rho, ...]}
  function rhoCdf(container, series) {
    const all = Object.values(series).flat().filter((x) => isFinite(x));
    const hi = Math.max(2, Math.min(10, Math.ceil((Math.max(...all, 1)) * 2) / 2));
    const W = 560, H = 300, L = 48, B = 36, T = 10, R = 140;
    const X = (v) => L + (Math.min(v, hi) / hi) * (W - L - R), Y = (p) => T + (1 - p) * (H - T - B);
    const root = svg("svg", { class: "cdf", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "CDF of rho" });
    root.append(svg("line", { x1: L, y1: Y(0), x2: W - R, y2: Y(0), class: "frame" }), svg("line", { x1: L, y1: Y(0), x2: L, y2: Y(1), class: "frame" }));
    for (let v = 0; v <= hi; v += 0.5) root.append(svg("text", { x: X(v), y: H - B + 16, "text-anchor": "middle", class: "axis" }, v.toFixed(1)));
    for (const p of [0, 0.5, 1]) root.append(svg("text", { x: L - 6, y: Y(p) + 4, "text-anchor": "end", class: "axis" }, p.toFixed(1)));
    root.append(svg("line", { x1: X(1), y1: Y(0), x2: X(1), y2: Y(1), class: "marker" }));
    root.append(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "axis" }, "finish-time fairness ρ"));
    Object.entries(series).forEach(([name, values], k) => {
      const v = values.filter((x) => isFinite(x)).sort((a, b) => a - b);
      let d = `M${X(0)} ${Y(0)}`;
      v.forEach((x, i) => { d += ` L${X(x)} ${Y(i / v.length)} L${X(x)} ${Y((i + 1) / v.length)}`; });
      const hue = (k * 97) % 360;
      root.append(svg("path", { d, class: "cdf-line", stroke: `hsl(${hue}, 65%, 40%)`, "data-series": name }));
      root.append(svg("text", { x: W - R + 8, y: T + 14 + 16 * k, fill: `hsl(${hue}, 65%, 40%)`, class: "legend" }, name));
    });
    container.replaceChildren(root);
  }

  return { el, svg, color, duration, num, percent, ranges, badge, table, cluster, timeline, reasons, rhoCdf, RUNNING_CODES };
})();
