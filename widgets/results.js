// fabnb's one renderer of a run's results. The static page (fabnb export RUN_DIR --html OUT), fabnb explore (that
// page served on loopback), JupyterLab's results viewer (that page from the server extension, in a frame) and the
// notebook widget (fabnb.views.widgets.ResultsExplorer, its data from the kernel) all draw through renderResults.
//
// renderResults(root, source) fills root. source.summary and source.cells are the data fabnb.views.page.page_data
// makes (the summary with its intervals, caveats, figures, window sections, comparison and calibration; one compact
// row per cell); source.load(name) resolves to a part read only when needed ("questions": expected answers and gold evidence;
// "detail-NNNN": the heavy texts of page_cells cells). Every text is shown with textContent, never as HTML.
// No import and no request to another host: the page must open from file://.

function renderResults(root, source) {
  "use strict";
  const started = performance.now();
  const S = source.summary, C = source.cells;
  const asked = Number(new URLSearchParams(window.location.search).get("rows"));   // JupyterLab's "Rows per page"
  const VIEW_ROWS = Number.isInteger(asked) && asked >= 10 && asked <= 1000 ? asked : 100;
  const timing = { open_ms: 0 };
  const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; };
  const fmt = (v) => (v === null || v === undefined) ? "-" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));
  const part = (name) => root.querySelector(`[data-part="${name}"]`);
  function table(rows, columns, into, cls) {
    const t = el("table", undefined, cls); const head = el("tr");
    columns.forEach((c) => head.appendChild(el("th", c))); t.appendChild(head);
    rows.forEach((r) => { const tr = el("tr"); columns.forEach((c) => tr.appendChild(el("td", fmt(r[c]), typeof r[c] === "number" ? "num" : ""))); t.appendChild(tr); });
    into.appendChild(t); return t;
  }
  root.classList.add("fabnb-results");
  root.tabIndex = 0;
  root.textContent = "";
  [["h1", "title"], ["div", "meta", "meta"], ["div", "comparison"], ["h2", null, null, "Caveats"], ["ul", "caveats", "caveats"],
   ["h2", null, null, "The judge against experts"], ["div", "calibration"],
   ["h2", null, null, "Scores (mean [95% interval], with the cells each covers)"], ["div", "means", "scroll"],
   ["div", "figures", "figures"], ["div", "sections"], ["h2", null, null, "Cells"], ["div", "filters", "filters"], ["div", "nav", "nav"],
   ["div", "cells", "scroll"], ["div", "detail", "detail"], ["h2", null, null, "Two configurations, question by question"],
   ["div", "pair", "filters"], ["div", "pairs", "scroll"],
   ["div", "help", "meta", "Keys: j / k move, Enter opens, Esc closes, / finds, n / p page; a click on a heading sorts."]]
    .forEach(([tag, name, cls, text]) => { const e = el(tag, text, cls); if (name) e.dataset.part = name; root.appendChild(e); });
  part("detail").hidden = true;

  // ---------------------------------------------------------------- the summary
  part("title").textContent = S.name;
  const run = (S.runs || [])[0] || {};
  part("meta").textContent = `fabnb ${S.fabnb || "?"}; judge ${S.judge || "?"} (${S.rubric_version || "rubric not recorded"}); last run ${run.status || "?"} ${run.ended || ""}. ${S.statistics || ""}`;
  (S.caveats.length ? S.caveats : ["none recorded in summary.md"]).forEach((c) => part("caveats").appendChild(el("li", c)));
  if (S.means.length) table(S.means, ["system", "context_k", "mode", "metric", "shown", "n", "planned"], part("means"));
  else part("means").appendChild(el("p", "No coverage table: the report is written at the end of a run (fabnb run, or fabnb report).", "meta"));
  S.figures.forEach((f) => { const img = el("img"); img.src = f.src; img.alt = f.name; part("figures").appendChild(img); });
  const sections = S.sections || [];   // summary.md's window sections (report/windows.json), each under its heading
  if (sections.length) part("sections").appendChild(el("h2", "Why the curve bends (the summary's window sections)"));
  sections.forEach((s) => { part("sections").appendChild(el("h3", s.title)); table(s.rows, s.columns, part("sections").appendChild(el("div", undefined, "scroll"))); });
  const cal = part("calibration"), K = S.calibration;
  if (!K) cal.appendChild(el("p", "Not calibrated: no expert has checked this judge's scores (fabnb rate --from RUN_DIR --sample N --raters A,B).", "meta"));
  else {
    Object.entries(K.verdicts).forEach(([m, v]) => cal.appendChild(el("p", `${m}: ${v.usable_alone ? "the judge may be used alone" : "not to be used alone"} (${v.why})`, "verdict " + (v.usable_alone ? "no-regression" : "regression"))));
    table(K.agreement, ["metric", "statistic", "value", "ci_low", "ci_high", "n_items", "n_raters"], cal);
    if (K.corrected_means) table(K.corrected_means, ["metric", "judge_mean", "judge_ci_low", "judge_ci_high", "estimate", "ci_low", "ci_high", "n_cells", "n_rated"], cal);
  }
  if (S.comparison) {
    const box = part("comparison"), cmp = S.comparison;
    box.appendChild(el("h2", "Comparison with the base run"));
    box.appendChild(el("p", `base ${cmp.base}, candidate ${cmp.candidate}; primary metric ${cmp.metric}, margin ${cmp.margin}`));
    box.appendChild(el("p", "verdict: " + cmp.verdict, "verdict " + cmp.verdict.replace(" ", "-")));
    cmp.notices.forEach((n) => box.appendChild(el("p", n, "meta")));
    table(cmp.primary, ["system", "metric", "mean", "ci_low", "ci_high", "n", "method", "verdict", "questions_needed"], box);
    if (cmp.differences.length) { box.appendChild(el("h3", "What differs")); table(cmp.differences, ["what", "base", "candidate", "kind"], box); }
    box.appendChild(el("h3", "Every metric and window"));
    table(cmp.table, ["system", "metric", "context_k", "mode", "base_mean", "candidate_mean", "mean", "ci_low", "ci_high", "n", "p_holm", "claimed"], box);
    const itemColumns = ["system", "context_k", "mode", "test_id", "base", "candidate", "d"];
    box.appendChild(el("h3", "Items that got worse (first 20; a click opens the cell below)"));
    const worse = table(cmp.items.filter((r) => r.d < 0).slice(0, 20), itemColumns, box, "items");
    box.appendChild(el("h3", "Items that got better (first 20)"));
    const better = table(cmp.items.filter((r) => r.d > 0).sort((a, b) => b.d - a.d).slice(0, 20), itemColumns, box, "items");
    [worse, better].forEach((t) => [...t.rows].slice(1).forEach((tr) => {
      tr.classList.add("fabnb-item");
      tr.addEventListener("click", () => { const [s, k, m, id] = [...tr.cells].slice(0, 4).map((td) => td.textContent); show(s, k, m, id); });
    }));
  }

  // ---------------------------------------------------------------- the cells
  const col = {}; C.columns.forEach((c, i) => { col[c] = i; });
  const rows = C.rows.map((r, i) => r.concat([i]));   // the last value: the cell's place, for its details
  const at = (r) => r[r.length - 1];
  const FILTERS = ["system", "context_k", "mode", "state", "test_type"];
  const filters = { system: "", context_k: "", mode: "", state: "", test_type: "", metric: "average", min: "", max: "", flagged: false, failures: false, miss: false, text: "" };
  let sortBy = null, descending = false, shown = 0, current = [], cursor = 0;
  const box = part("filters");
  function select(name, values, into, label) {
    const wrap = el("label", label || name); const s = el("select"); s.dataset.filter = name;
    s.appendChild(el("option", "(all)")).value = "";
    values.forEach((v) => { const o = el("option", v); o.value = String(v); s.appendChild(o); });
    s.addEventListener("change", () => { filters[name] = s.value; shown = 0; render(); });
    wrap.appendChild(s); (into || box).appendChild(wrap); return s;
  }
  const distinct = (c) => col[c] === undefined ? [] : [...new Set(rows.map((r) => r[col[c]]))].filter((v) => v !== null && v !== "").sort((a, b) => (a > b) - (a < b));
  FILTERS.forEach((c) => select(c, distinct(c)));
  const metricSel = select("metric", [...C.metrics, "average"]); metricSel.value = "average";
  [["min", "score ≥"], ["max", "score ≤"], ["text", "question or id contains ( / )"]].forEach(([name, title]) => {
    const label = el("label", title); const input = el("input"); input.dataset.filter = name; input.size = name === "text" ? 24 : 5;
    input.addEventListener("input", () => { filters[name] = input.value; shown = 0; render(); });
    input.addEventListener("keydown", (e) => { if (e.key === "Escape" || e.key === "Enter") root.focus(); e.stopPropagation(); });
    label.appendChild(input); box.appendChild(label);
  });
  [["flagged", "judge sanity flags", "flags"], ["failures", "judge failures", "judge_failures"], ["miss", "retrieval misses", "gold_retrieved"]].forEach(([name, title, needs]) => {
    if (col[needs] === undefined) return;
    const label = el("label", title); const check = el("input"); check.type = "checkbox"; check.dataset.filter = name;
    check.addEventListener("change", () => { filters[name] = check.checked; shown = 0; render(); });
    label.appendChild(check); box.appendChild(label);
  });
  const nav = part("nav"), count = el("span", "", "count");
  const prev = el("button", "previous"), next = el("button", "next"), csv = el("button", "download CSV of these cells");
  nav.append(count, " ", prev, " ", next, " ", csv);
  function keep(r) {
    for (const c of FILTERS) if (filters[c] !== "" && String(r[col[c]]) !== filters[c]) return false;
    const v = r[col[filters.metric || "average"]];
    if (filters.min !== "" && !(v !== null && v >= Number(filters.min))) return false;
    if (filters.max !== "" && !(v !== null && v <= Number(filters.max))) return false;
    if (filters.flagged && !r[col.flags]) return false;
    if (filters.failures && !r[col.judge_failures]) return false;
    if (filters.miss && r[col.gold_retrieved] !== false) return false;
    if (filters.text) {
      const t = filters.text.toLowerCase(), id = String(r[col.test_id]);
      if (!id.toLowerCase().includes(t) && !String(C.questions[id] || "").toLowerCase().includes(t)) return false;
    }
    return true;
  }
  const cellColumns = ["system", "context_k", "mode", "test_id", "state", "test_type", ...C.metrics, "average", "flags"].filter((c) => col[c] !== undefined);
  function order(list) {
    if (sortBy === null) return list;
    const i = col[sortBy], sign = descending ? -1 : 1;
    return list.slice().sort((a, b) => {   // missing values last, whichever the direction
      const x = a[i], y = b[i];
      if (x === null || y === null) return (x === null) - (y === null);
      return sign * ((x > y) - (x < y));
    });
  }
  function render() {
    const t0 = performance.now();
    current = order(rows.filter(keep));
    cursor = Math.min(cursor, Math.max(0, Math.min(VIEW_ROWS, current.length - shown) - 1));
    const t = el("table", undefined, "cells"); const head = el("tr");
    cellColumns.forEach((c) => {
      const th = el("th", c + (sortBy === c ? (descending ? " ▼" : " ▲") : "")); th.dataset.column = c;
      th.addEventListener("click", () => { descending = sortBy === c ? !descending : false; sortBy = c; shown = 0; render(); });
      head.appendChild(th);
    });
    t.appendChild(head);
    current.slice(shown, shown + VIEW_ROWS).forEach((r, k) => {
      const tr = el("tr", undefined, "fabnb-row" + (k === cursor ? " current" : "")); tr.dataset.cell = String(at(r));
      cellColumns.forEach((c) => tr.appendChild(el("td", fmt(r[col[c]]), typeof r[col[c]] === "number" ? "num" : "")));
      tr.addEventListener("click", () => { cursor = k; open(r, tr); }); t.appendChild(tr);
    });
    part("cells").replaceChildren(t);
    count.textContent = `${current.length} of ${rows.length} cells` + (current.length ? `; rows ${shown + 1}-${Math.min(shown + VIEW_ROWS, current.length)}` : "");
    timing.filter_ms = performance.now() - t0;
  }
  const page = (delta) => { const to = shown + delta * VIEW_ROWS; if (to >= 0 && to < current.length) { shown = to; cursor = 0; render(); } };
  prev.addEventListener("click", () => page(-1));
  next.addEventListener("click", () => page(1));
  csv.addEventListener("click", () => {   // the filtered cells, in their order: made here, no request
    const quote = (v) => {   // a text a spreadsheet would run as a formula (=, +, -, @) is kept as text
      let s = v === null || v === undefined ? "" : String(v);
      if (typeof v === "string" && /^[=+\-@]/.test(s)) s = "'" + s;
      return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    };
    const lines = [C.columns.map(quote).join(",")].concat(current.map((r) => C.columns.map((c) => quote(r[col[c]])).join(",")));
    const a = el("a"); a.href = URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "text/csv" }));
    a.download = `${S.name}-cells.csv`; root.appendChild(a); a.click(); a.remove();
  });
  let questions = null;
  function open(r, tr) {
    root.querySelectorAll("tr.selected").forEach((x) => x.classList.remove("selected")); if (tr) tr.classList.add("selected");
    const i = at(r), d = part("detail"); d.hidden = false; d.textContent = "loading…";
    Promise.all([source.load("detail-" + String(Math.floor(i / C.page_cells)).padStart(4, "0")),
                 questions || source.load("questions").then((q) => { questions = q; return q; })]).then(([part_, qs]) => {
      const x = part_[i % C.page_cells], id = r[col.test_id], q = qs[id] || {};
      const gold = new Set(q.gold_doc_ids || []);
      d.textContent = "";
      d.appendChild(el("h3", `${r[col.system]} · ${r[col.context_k]}K · mode ${r[col.mode]} · ${id} (${r[col.state]})`, "key"));
      const c = x.call || {}, known = (v) => v !== null && v !== undefined;
      d.appendChild(el("div", "answer's call: " + [known(c.latency_s) ? `${fmt(c.latency_s)} s` : "latency not recorded",
        known(c.prompt_tokens) ? `${c.prompt_tokens} prompt + ${c.completion_tokens} completion tokens` : "tokens not recorded",
        known(c.cost_usd) ? `$${c.cost_usd.toFixed(6)}` : "cost unknown (no price for this model)"].join(" · "), "meta call"));
      const text = (title, value, cls) => { d.appendChild(el("h3", title)); d.appendChild(el("div", value || "(none)", "text " + (cls || ""))); };
      text("Question", C.questions[id] || "(not in the page)", "question");
      text("Expected answer", q.expected);
      text("Gold evidence", q.gold_evidence, "gold-evidence");
      d.appendChild(el("h3", `Retrieved passages (${x.sources.length}), in rank order`));
      x.sources.forEach((s, k) => {
        const g = gold.has(s.doc_id), p = el("div", undefined, "source" + (g ? " gold" : ""));
        p.appendChild(el("div", `#${k + 1} ${s.doc_id}${s.score === null || s.score === undefined ? "" : " · " + fmt(s.score)}${g ? " · holds the gold evidence" : ""}`, "meta"));
        p.appendChild(el("div", s.text, "text")); d.appendChild(p);
      });
      text("Answer", x.answer || (x.error ? "[error] " + x.error : ""), "answer");
      d.appendChild(el("h3", "The judge's scores and reasons"));
      table(C.metrics.map((m) => ({ metric: m, score: r[col[m]], reason: x.reasons[m] || "" })), ["metric", "score", "reason"], d, "scores");
      const close = el("button", "close (Esc)"); close.addEventListener("click", () => { d.hidden = true; root.focus(); }); d.appendChild(close);
      timing.opened = (timing.opened || 0) + 1;
    }, (err) => { d.textContent = err.message; });
  }
  // One cell by its key: the filters narrow to it and it opens (an item of the comparison, or #cell= in the address).
  function show(system, context_k, mode, test_id) {
    const r = rows.find((x) => String(x[col.system]) === system && fmt(x[col.context_k]) === fmt(Number(context_k)) && String(x[col.mode]) === mode && String(x[col.test_id]) === test_id);
    if (!r) return false;
    Object.assign(filters, { system: system, context_k: String(r[col.context_k]), mode: mode, state: "", test_type: "", min: "", max: "", flagged: false, failures: false, miss: false, text: test_id });
    box.querySelectorAll("[data-filter]").forEach((e) => { if (e.type === "checkbox") e.checked = false; else e.value = filters[e.dataset.filter]; });
    shown = 0; cursor = 0; render();
    const row = root.querySelector("tr.fabnb-row"); if (row) { row.scrollIntoView({ block: "nearest" }); open(r, row); }
    return true;
  }
  root.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
    const visible = root.querySelectorAll("tr.fabnb-row");
    let handled = true;
    if (e.key === "j" || e.key === "k") { cursor = Math.max(0, Math.min(visible.length - 1, cursor + (e.key === "j" ? 1 : -1))); render(); }
    else if (e.key === "Enter" && current[shown + cursor]) open(current[shown + cursor], visible[cursor]);
    else if (e.key === "Escape") part("detail").hidden = true;
    else if (e.key === "n" || e.key === "p") page(e.key === "n" ? 1 : -1);
    else if (e.key === "/") box.querySelector('[data-filter="text"]').focus();
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  });

  // ---------------------------------------------------------------- two configurations
  const configs = [...new Set(rows.map((r) => JSON.stringify([r[col.system], r[col.context_k], r[col.mode]])))].sort();
  const pair = part("pair");
  const pick = (name, index) => {
    const label = el("label", name); const s = el("select"); s.dataset.pair = name;
    configs.forEach((c) => { const [sy, k, m] = JSON.parse(c); const o = el("option", `${sy}, ${k}K, mode ${m}`); o.value = c; s.appendChild(o); });
    s.selectedIndex = Math.min(index, configs.length - 1); label.appendChild(s); pair.appendChild(label); return s;
  };
  if (configs.length > 1) {
    const a = pick("a", 0), b = pick("b", 1), go = el("button", "compare");
    pair.appendChild(go);
    go.addEventListener("click", () => {
      const metric = filters.metric || "average", i = col[metric];
      const side = (s) => { const [sy, k, m] = JSON.parse(s.value), out = {}; rows.forEach((r) => { if (r[col.system] === sy && r[col.context_k] === k && r[col.mode] === m) out[r[col.test_id]] = r; }); return out; };
      const A = side(a), B = side(b);
      const both = Object.keys(A).filter((id) => id in B).map((id) => ({ test_id: id, [metric + "_a"]: A[id][i], [metric + "_b"]: B[id][i],
        drop: A[id][i] === null || B[id][i] === null ? null : A[id][i] - B[id][i], _row: A[id] }));
      both.sort((x, y) => (x.drop === null) - (y.drop === null) || (y.drop - x.drop));
      const out = part("pairs"); out.textContent = "";
      out.appendChild(el("p", `${both.length} questions in both; ${metric}, largest drop from a to b first (a click opens a's cell)`, "meta"));
      const t = table(both, ["test_id", metric + "_a", metric + "_b", "drop"], out, "pairs");
      [...t.rows].slice(1).forEach((tr, k) => { tr.classList.add("fabnb-item"); tr.addEventListener("click", () => { const r = both[k]._row; show(String(r[col.system]), String(r[col.context_k]), String(r[col.mode]), String(r[col.test_id])); }); });
    });
  } else pair.appendChild(el("p", "One configuration only: nothing to set side by side.", "meta"));

  render();
  const fromAddress = () => {   // #cell=system|context_k|mode|test_id
    const m = /^#cell=(.*)$/.exec(window.location.hash); if (!m) return;
    const parts = decodeURIComponent(m[1]).split("|"); if (parts.length === 4) show(...parts);
  };
  if (source.address) { window.addEventListener("hashchange", fromAddress); fromAddress(); }   // a page of its own only
  timing.open_ms = performance.now() - started;
  root.dataset.ready = "1";   // what a test waits for with a selector (a page's CSP may forbid eval)
  return timing;
}

if (typeof window !== "undefined") window.renderResults = renderResults;
