// The replay report written by `shockwave report`: draws the embedded results with views.js.
"use strict";

(() => {
  const V = SWViews;
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const WINDOW = 100; // rounds shown at once in the Gantt
  const state = { run: 0, sortKey: "job_id", sortDir: "asc", selected: null, ganttStart: 0, round: 0 };

  const rowOf = (row) => Object.fromEntries(data.reason_row.map((key, i) => [key, row[i]]));

  function runData() {
    const run = data.runs[state.run];
    if (!run.timeline) {
      // finished jobs by round: a job missing from a round after running in the one before is
      // preempted unless it finished before that round started
      const finish = Object.fromEntries(run.jobs.map((j) => [String(j.job_id), j.finish_s]));
      run.timeline = run.rounds.map((r, i) => {
        const prev = i > 0 ? run.rounds[i - 1].placement : {};
        const preempted = Object.keys(prev).filter((j) => !(j in r.placement) && finish[j] > r.start_s).map(Number);
        return { round_index: r.round, start_s: r.start_s, placement: r.placement, preempted };
      });
    }
    return run;
  }

  const section = (title, ...children) => V.el("section", { class: "panel" }, V.el("h2", { text: title }), ...children);

  const JOB_COLUMNS = [
    { key: "job_id", label: "job" }, { key: "model", label: "model" }, { key: "scale_factor", label: "GPUs" },
    { key: "mode", label: "mode" },
    { key: "arrival_s", label: "arrival", render: (j) => V.duration(j.arrival_s - data.runs[state.run].jobs[0].arrival_s) },
    { key: "jct_s", label: "JCT", render: (j) => V.duration(j.jct_s) },
    { key: "isolated_runtime_s", label: "isolated run time", render: (j) => V.duration(j.isolated_runtime_s) },
    { key: "rho", label: "ρ", render: (j) => V.num(j.rho) },
    { key: "batch_size_changes", label: "batch size changes",
      render: (j) => `${j.batch_size_changes} (${j.initial_batch_size} → ${j.final_batch_size})` },
    { key: "rounds_run", label: "rounds run" },
  ];

  function draw() {
    const run = runData();
    const root = document.getElementById("report");
    document.getElementById("subtitle").textContent = `${data.runs.length} run(s) · ${run.jobs.length} jobs · ${run.rounds.length} rounds with detail`;
    const picker = V.el("select", { id: "run-picker", onchange: (e) => { state.run = Number(e.target.value); state.selected = null; state.ganttStart = 0; state.round = 0; draw(); } },
      ...data.runs.map((r, i) => V.el("option", { value: i, selected: i === state.run, text: r.name })));
    const summary = V.el("table", { class: "grid summary" }, V.el("tbody", {},
      ...data.summary.filter(([key]) => key in run.metrics).map(([key, label]) => V.el("tr", {},
        V.el("td", { text: label }), V.el("td", { text: typeof run.metrics[key] === "number" ? V.num(run.metrics[key], 5) : String(run.metrics[key]) })))));
    const jobs = V.el("div", { id: "jobs", class: "scroll" });
    V.table(jobs, run.jobs, JOB_COLUMNS, {
      sortKey: state.sortKey, sortDir: state.sortDir, selected: state.selected, onSelect: select,
      onSort: (key) => { state.sortDir = state.sortKey === key && state.sortDir === "asc" ? "desc" : "asc"; state.sortKey = key; draw(); },
    });
    const cdf = V.el("div", { id: "rho-cdf" });
    V.rhoCdf(cdf, Object.fromEntries(data.runs.map((r) => [r.name, r.jobs.map((j) => j.rho)])));

    const gantt = V.el("div", { id: "timeline", class: "scroll" });
    const last = Math.max(0, run.timeline.length - WINDOW);
    const ganttSlider = V.el("input", { type: "range", id: "gantt-start", min: 0, max: last, value: state.ganttStart,
      oninput: (e) => { state.ganttStart = Number(e.target.value); drawGantt(); } });
    const ganttLabel = V.el("span");
    const drawGantt = () => {
      const shown = run.timeline.slice(state.ganttStart, state.ganttStart + WINDOW);
      ganttLabel.textContent = shown.length ? ` rounds ${shown[0].round_index}–${shown[shown.length - 1].round_index} of ${run.timeline.length}` : " no rounds";
      V.timeline(gantt, shown, run.metrics.num_gpus, { onSelect: select, width: 1100 });
    };

    const roundView = V.el("div", { id: "round-reasons", class: "scroll" });
    const roundSlider = V.el("input", { type: "range", id: "round-pick", min: 0, max: Math.max(0, run.rounds.length - 1), value: state.round,
      oninput: (e) => { state.round = Number(e.target.value); drawRound(); } });
    const roundLabel = V.el("span");
    const drawRound = () => {
      const r = run.rounds[state.round];
      if (!r) { roundLabel.textContent = " no per-round detail in these results"; return; }
      roundLabel.textContent = ` round ${r.round} (t = ${V.duration(r.start_s - run.jobs[0].arrival_s)})`;
      const rows = Object.entries(r.reasons).map(([job, row]) => ({ job_id: Number(job), ...rowOf(row), gpus: (r.placement[job] || []).join(", ") }));
      V.table(roundView, rows, [
        { key: "job_id", label: "job" }, { key: "code", label: "decision", render: (x) => V.badge(x.code) },
        { key: "text", label: "why", cls: "why" }, { key: "gpus", label: "GPUs" },
        { key: "priority", label: "priority", render: (x) => V.num(x.priority) },
        { key: "target_finish_s", label: "finish-time target", render: (x) => (x.target_finish_s != null ? V.duration(x.target_finish_s - run.jobs[0].arrival_s) : "—") },
        { key: "planned_rounds", label: "planned rounds", value: (x) => (x.planned_rounds || [])[0], render: (x) => V.ranges(x.planned_rounds) },
      ], { sortKey: "job_id", onSelect: select, selected: state.selected });
    };

    const reasons = V.el("div", { id: "reasons" });
    if (state.selected !== null) {
      const rows = run.rounds.filter((r) => String(state.selected) in r.reasons)
        .map((r) => ({ round_index: r.round, ...rowOf(r.reasons[String(state.selected)]) }));
      V.reasons(reasons, state.selected, rows, { formatTime: (s) => `t = ${V.duration(s - run.jobs[0].arrival_s)}` });
    }

    root.replaceChildren(
      section("Run", V.el("label", { text: "Policy " }, picker), summary),
      section("Finish-time fairness ρ (CDF, all runs)", cdf),
      section("Timeline: leases per GPU", V.el("div", { class: "controls" }, V.el("label", { text: "First round " }, ganttSlider), ganttLabel), gantt),
      section("The market's reasons, per round", V.el("div", { class: "controls" }, V.el("label", { text: "Round " }, roundSlider), roundLabel), roundView),
      section("Jobs (click one for its reasons in every round)", jobs),
      ...(state.selected !== null ? [V.el("section", { class: "panel", id: "reasons-panel" }, reasons)] : []),
    );
    drawGantt();
    drawRound();
  }

  function select(jobId) {
    state.selected = jobId;
    draw();
    document.getElementById("reasons-panel").scrollIntoView();
  }

  draw();
})();
