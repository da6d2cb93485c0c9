// The live dashboard of `shockwave serve`: reads the JSON API with the token kept in this tab's
// session storage (never in a URL), redraws on the server's event stream, and reconnects when
// the server restarts.
"use strict";

(() => {
  const V = SWViews;
  const TOKEN_KEY = "shockwave-token";
  const $ = (id) => document.getElementById(id);
  const state = {
    pageSize: 50, cursors: [null], page: 0, nextCursor: null, stateFilter: "", text: "",
    sortKey: "job_id", sortDir: "asc", selected: null, jobs: [], cluster: null, timeline: null,
    serverId: null, refreshing: false, again: false, stream: null,
  };

  const token = () => sessionStorage.getItem(TOKEN_KEY);

  class Unauthorized extends Error {}

  async function api(path) {
    const response = await fetch(path, { headers: { Authorization: `Bearer ${token()}`, Accept: "application/json" }, cache: "no-store" });
    if (response.status === 401) throw new Unauthorized("the token was refused");
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).error; } catch (_) { /* not JSON */ }
      throw new Error(`${path}: ${response.status} ${detail}`);
    }
    return response.json();
  }

  function showLogin(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (state.stream) state.stream.abort();
    $("app-view").hidden = true;
    $("logout").hidden = true;
    $("login-view").hidden = false;
    $("login-error").textContent = message || "";
    setConnection("not connected", "idle");
    $("token").focus();
  }

  function showApp() {
    $("login-view").hidden = true;
    $("app-view").hidden = false;
    $("logout").hidden = false;
    listen();
  }

  function setConnection(text, cls) {
    const node = $("connection");
    node.textContent = text;
    node.className = `status ${cls}`;
  }

  // -- data -------------------------------------------------------------------------------
  async function refresh() {
    if (state.refreshing) { state.again = true; return; }
    state.refreshing = true;
    try {
      do {
        state.again = false;
        const query = new URLSearchParams({ limit: String(state.pageSize) });
        const cursor = state.cursors[state.page];
        if (cursor) query.set("cursor", cursor);
        if (state.stateFilter) query.set("state", state.stateFilter);
        const [cluster, page, timeline] = await Promise.all([
          api("/v1/cluster"), api(`/v1/jobs?${query}`), api("/v1/timeline?rounds=60"),
        ]);
        Object.assign(state, { cluster, timeline, jobs: page.jobs, nextCursor: page.next_cursor });
        const reasons = state.selected !== null ? await api(`/v1/jobs/${state.selected}/reasons`).catch(() => null) : null;
        render(reasons);
      } while (state.again);
    } catch (err) {
      if (err instanceof Unauthorized) showLogin("The token was refused. Sign in again.");
      else setConnection(`error: ${err.message}`, "bad");
    } finally {
      state.refreshing = false;
    }
  }

  // -- the event stream (fetch, so that the token travels in a header) ----------------------
  async function listen() {
    if (state.stream) state.stream.abort();
    const controller = new AbortController();
    state.stream = controller;
    let delay = 500;
    while (!controller.signal.aborted && token()) {
      try {
        const response = await fetch("/v1/events", { headers: { Authorization: `Bearer ${token()}` }, signal: controller.signal, cache: "no-store" });
        if (response.status === 401) { showLogin("The token was refused. Sign in again."); return; }
        if (!response.ok || !response.body) throw new Error(`events: ${response.status}`);
        delay = 500;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = /^event: (.*)$/m.exec(block), data = /^data: (.*)$/m.exec(block);
            if (!event) continue;
            const payload = data ? JSON.parse(data[1]) : {};
            if (event[1] === "hello") {
              const restarted = state.serverId !== null && state.serverId !== payload.server_id;
              state.serverId = payload.server_id;
              setConnection(restarted ? "live (server restarted)" : "live", "ok");
            }
            refresh();
          }
        }
        throw new Error("the event stream ended");
      } catch (err) {
        if (controller.signal.aborted) return;
        setConnection(`reconnecting (${err.message})`, "bad");
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  // -- drawing ------------------------------------------------------------------------------
  const clock = (s) => (s == null ? "—" : new Date(s * 1000).toLocaleTimeString());

  const COLUMNS = [
    { key: "job_id", label: "job" },
    { key: "name", label: "name" },
    { key: "model", label: "model" },
    { key: "state", label: "state", render: (j) => V.el("span", { class: `state-${j.state}`, text: j.state }) },
    { key: "scale_factor", label: "GPUs" },
    { key: "batch_size", label: "batch size", render: (j) => `${j.batch_size}${j.batch_size_changes ? ` (${j.batch_size_changes} changes)` : ""}` },
    { key: "progress", label: "progress", value: (j) => j.steps_done / Math.max(1, j.total_steps),
      render: (j) => V.el("progress", { max: j.total_steps, value: j.steps_done, title: `${j.steps_done} / ${j.total_steps} steps` }) },
    { key: "predicted_remaining_s", label: "predicted remaining", render: (j) => V.duration(j.predicted_remaining_s) },
    { key: "prediction_error", label: "prediction error", render: (j) => V.percent(j.prediction_error) },
    { key: "rho", label: "ρ now", render: (j) => V.num(j.rho) },
    { key: "rho_projected", label: "ρ projected", render: (j) => V.num(j.rho_projected) },
    { key: "market_code", label: "market decision", render: (j) => (j.market_code ? V.badge(j.market_code) : "—") },
  ];

  function render(reasons) {
    const c = state.cluster;
    if (c) {
      const left = c.round_end_s - Date.now() / 1000;
      $("round").textContent = `round ${c.round_index} · ${c.num_gpus} GPUs · ${c.running_jobs} running · ${c.queued_jobs} queued`
        + (c.round_start_s ? ` · next round in ${V.duration(Math.max(0, left))}` : "")
        + (c.policy_overdue_rounds ? ` · ${c.policy_overdue_rounds} round${c.policy_overdue_rounds > 1 ? "s" : ""} decided without the policy (it overran policy_deadline_s)` : "");
      const placement = Object.fromEntries(c.placement.map((a) => [a.job_id, a.gpu_ids]));
      V.cluster($("cluster"), c.nodes, placement);
    }
    if (state.timeline) V.timeline($("timeline"), state.timeline.rounds, state.timeline.num_gpus, { onSelect: select, width: 900 });
    const text = state.text.toLowerCase();
    const rows = text ? state.jobs.filter((j) => [j.name, j.model, j.state, j.market_code || ""].some((v) => String(v).toLowerCase().includes(text))) : state.jobs;
    V.table($("jobs"), rows, COLUMNS, {
      sortKey: state.sortKey, sortDir: state.sortDir, selected: state.selected, onSelect: select,
      onSort: (key) => {
        state.sortDir = state.sortKey === key && state.sortDir === "asc" ? "desc" : "asc";
        state.sortKey = key;
        render(reasons);
      },
    });
    $("page-label").textContent = ` page ${state.page + 1} `;
    $("prev-page").disabled = state.page === 0;
    $("next-page").disabled = !state.nextCursor;
    if (state.selected !== null && reasons) {
      $("reasons-panel").hidden = false;
      V.reasons($("reasons"), state.selected, reasons.reasons, { formatTime: clock });
    }
  }

  function select(jobId) {
    state.selected = jobId;
    refresh();
  }

  function firstPage() {
    state.cursors = [null];
    state.page = 0;
    refresh();
  }

  // -- wiring -------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("login").onsubmit = async (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("token").value);
      $("token").value = "";
      try {
        await api("/v1/cluster");
      } catch (err) {
        showLogin(err instanceof Unauthorized ? "That token was refused." : `Cannot reach the server: ${err.message}`);
        return;
      }
      showApp();
      refresh();
    };
    $("logout").onclick = () => showLogin("");
    $("state-filter").onchange = (e) => { state.stateFilter = e.target.value; firstPage(); };
    $("page-size").onchange = (e) => { state.pageSize = Number(e.target.value); firstPage(); };
    $("text-filter").oninput = (e) => { state.text = e.target.value; render(null); };
    $("prev-page").onclick = () => { if (state.page > 0) { state.page -= 1; refresh(); } };
    $("next-page").onclick = () => {
      if (!state.nextCursor) return;
      state.cursors[state.page + 1] = state.nextCursor;
      state.page += 1;
      refresh();
    };
    $("close-reasons").onclick = () => { state.selected = null; $("reasons-panel").hidden = true; render(null); };
    if (token()) { showApp(); refresh(); } else showLogin("");
  });
})();
