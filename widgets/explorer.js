// Results explorer: a view over fabnb.views.explorer.Explorer (Python side: fabnb.views.widgets.ResultsExplorer).
// Only the visible page of rows is sent; every text (questions, answers, passages, reasons) is shown
// with textContent, so nothing in them can inject markup or script.

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

const fmt = (x, d = 3) => (typeof x === "number" ? x.toFixed(d) : "–");
const KEYS = ["system", "model", "context_k", "mode", "test_id"];

function render({ model, el }) {
  const root = h("div", "fabnb-explorer");
  root.tabIndex = 0;
  el.appendChild(root);
  const send = (msg) => model.send(msg);
  let cursor = 0;

  function select(name, label) {
    const box = h("select", "fabnb-filter");
    box.dataset.filter = name;
    const any = h("option", null, `${label}: any`);
    any.value = "";
    box.appendChild(any);
    const current = model.get("filters")[name];
    for (const v of model.get("options")[name] || []) {
      const o = h("option", null, String(v));
      o.value = String(v);
      if (current !== undefined && String(current) === String(v)) o.selected = true;
      box.appendChild(o);
    }
    box.addEventListener("change", () => send({ action: "filter", [name]: box.value }));
    return box;
  }

  function toggle(name, label) {
    const wrap = h("label", "fabnb-toggle");
    const box = h("input");
    box.type = "checkbox";
    box.checked = Boolean(model.get("filters")[name]);
    box.addEventListener("change", () => send({ action: "filter", [name]: box.checked }));
    wrap.append(box, document.createTextNode(" " + label));
    return wrap;
  }

  function drawDetail(d) {
    const box = h("div", "fabnb-detail");
    box.appendChild(h("div", "fabnb-key", KEYS.map((k) => `${k} ${d.key[k]}`).join(" · ") + ` · ${d.state}`));
    const part = (title, text, cls) => {
      box.appendChild(h("div", "fabnb-label", title));
      box.appendChild(h("div", "fabnb-text " + (cls || ""), text || "–"));
    };
    part("Question", d.question, "fabnb-question");
    part("Expected answer", d.expected);
    part("Gold evidence", d.gold_evidence);
    box.appendChild(h("div", "fabnb-label", `Retrieved passages (${d.sources.length}), in rank order`));
    for (const s of d.sources) {
      const p = h("div", "fabnb-source" + (s.gold ? " fabnb-gold" : ""));
      p.appendChild(h("div", "fabnb-source-head", `#${s.rank} ${s.doc_id} · ${fmt(s.score)}` + (s.gold ? " · holds the gold evidence" : "")));
      p.appendChild(h("div", "fabnb-text", s.text));
      box.appendChild(p);
    }
    part("Answer", d.answer + (d.error ? `\n[error] ${d.error}` : ""), "fabnb-answer");
    box.appendChild(h("div", "fabnb-label", "Scores"));
    const table = h("table", "fabnb-scores");
    const head = h("tr");
    for (const c of ["metric", "score", "raw", "weighted", "scoring", "reason"]) head.appendChild(h("th", null, c));
    table.appendChild(head);
    for (const s of d.scores) {
      const tr = h("tr", s.status === "ok" ? "" : "fabnb-failed");
      for (const v of [s.metric, fmt(s.score), s.raw_score ?? "–", fmt(s.weighted_score, 2), s.scoring || s.status,
                       s.status === "ok" ? s.reason : `${s.status}: ${s.error}`]) tr.appendChild(h("td", null, v));
      table.appendChild(tr);
    }
    box.appendChild(table);
    if (d.reference) box.appendChild(h("div", "fabnb-reference",
      `Reference check (not G-Eval): ${d.reference.correct ? "correct" : "not correct"} · expected ${d.reference.expected} · found ${d.reference.found} · ${d.reference.note || ""}`));
    const close = h("button", "fabnb-close", "Back to the table (Esc)");
    close.addEventListener("click", () => send({ action: "close" }));
    box.appendChild(close);
    return box;
  }

  function drawCompare(c) {
    const box = h("div", "fabnb-compare");
    box.appendChild(h("div", "fabnb-label", `${c.a_label} → ${c.b_label}: ${c.rows.length} questions, largest drop first`));
    const table = h("table", "fabnb-table");
    const head = h("tr");
    for (const col of c.columns) head.appendChild(h("th", null, col));
    table.appendChild(head);
    for (const r of c.rows) {
      const tr = h("tr");
      for (const col of c.columns) tr.appendChild(h("td", null, typeof r[col] === "number" ? fmt(r[col]) : r[col]));
      table.appendChild(tr);
    }
    box.appendChild(table);
    const close = h("button", "fabnb-close", "Back to the table");
    close.addEventListener("click", () => send({ action: "close" }));
    box.appendChild(close);
    return box;
  }

  function draw() {
    root.replaceChildren();
    const top = h("div", "fabnb-top");
    for (const [name, label] of [["system", "system"], ["context_k", "context"], ["mode", "mode"],
                                 ["test_type", "test type"], ["question_format", "format"], ["metric", "metric"],
                                 ["state", "state"]]) top.appendChild(select(name, label));
    const min = h("input", "fabnb-range");
    min.placeholder = "score ≥";
    min.value = model.get("filters").score_min ?? "";
    min.addEventListener("keydown", (e) => { if (e.key === "Enter") send({ action: "filter", score_min: min.value }); e.stopPropagation(); });
    const max = h("input", "fabnb-range");
    max.placeholder = "score ≤";
    max.value = model.get("filters").score_max ?? "";
    max.addEventListener("keydown", (e) => { if (e.key === "Enter") send({ action: "filter", score_max: max.value }); e.stopPropagation(); });
    top.append(min, max, toggle("judge_failures", "judge failures"), toggle("retrieval_miss", "retrieval misses"),
               toggle("flagged", "judge sanity flags"));
    const search = h("input", "fabnb-search");
    search.placeholder = "find in question or answer ( / )";
    search.value = model.get("filters").text || "";
    search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { send({ action: "filter", text: search.value }); root.focus(); }
      else if (e.key === "Escape") root.focus();
      e.stopPropagation();
    });
    top.appendChild(search);
    root.appendChild(top);
    if (model.get("error")) root.appendChild(h("div", "fabnb-error", model.get("error")));
    if (model.get("saved")) root.appendChild(h("div", "fabnb-saved", model.get("saved")));

    const detail = model.get("detail");
    const compare = model.get("comparison");
    if (detail && detail.key) { root.appendChild(drawDetail(detail)); return; }
    if (compare && compare.rows) { root.appendChild(drawCompare(compare)); return; }

    const rows = model.get("rows");
    const columns = model.get("columns");
    cursor = Math.min(cursor, Math.max(0, rows.length - 1));
    root.appendChild(h("div", "fabnb-count", rows.length || model.get("total")
      ? `${model.get("shown")} of ${model.get("total")} cells · page ${model.get("page") + 1} of ${Math.max(1, model.get("pages"))}`
      : "No cells: the stores are empty."));
    if (rows.length === 0 && model.get("total")) root.appendChild(h("div", "fabnb-empty", "No cell passes these filters."));
    const table = h("table", "fabnb-table");
    const head = h("tr");
    const sort = model.get("sort");
    for (const col of columns) {
      const th = h("th", null, col + (sort.column === col ? (sort.descending ? " ▼" : " ▲") : ""));
      th.addEventListener("click", () => send({ action: "sort", column: col, descending: sort.column === col ? !sort.descending : false }));
      head.appendChild(th);
    }
    table.appendChild(head);
    rows.forEach((r, i) => {
      const tr = h("tr", "fabnb-row" + (i === cursor ? " fabnb-current" : "") + (r.state !== "judged" ? " fabnb-muted" : ""));
      for (const col of columns) tr.appendChild(h("td", null, typeof r[col] === "number" && col !== "context_k" ? fmt(r[col]) : r[col]));
      tr.addEventListener("click", () => { cursor = i; send({ action: "open", cell: r }); });
      table.appendChild(tr);
    });
    root.appendChild(table);
    const nav = h("div", "fabnb-nav");
    const prev = h("button", null, "◀ page");
    prev.addEventListener("click", () => send({ action: "page", number: model.get("page") - 1 }));
    const next = h("button", null, "page ▶");
    next.addEventListener("click", () => send({ action: "page", number: model.get("page") + 1 }));
    const csv = h("button", null, "export CSV");
    csv.addEventListener("click", () => send({ action: "export" }));
    nav.append(prev, next, csv);
    root.appendChild(nav);
    root.appendChild(h("div", "fabnb-help", "Keys: j/k move · Enter open · Esc back · / find · n/p page · click a heading to sort"));
  }

  root.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
    const rows = model.get("rows");
    let handled = true;
    if (e.key === "j") { cursor = Math.min(cursor + 1, rows.length - 1); draw(); }
    else if (e.key === "k") { cursor = Math.max(cursor - 1, 0); draw(); }
    else if (e.key === "Enter" && rows[cursor]) send({ action: "open", cell: rows[cursor] });
    else if (e.key === "Escape") send({ action: "close" });
    else if (e.key === "n") send({ action: "page", number: model.get("page") + 1 });
    else if (e.key === "p") send({ action: "page", number: model.get("page") - 1 });
    else if (e.key === "/") { e.preventDefault(); root.querySelector(".fabnb-search").focus(); }
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  });
  const names = ["rows", "columns", "total", "shown", "page", "pages", "filters", "options", "sort", "detail",
                 "comparison", "error", "saved"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  // Cleanup: the listeners go with the view, or a re-rendered cell keeps drawing into a removed node.
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
    root.remove();
  };
}

export default { render };
