// QA curator: a view over fabnb.qa.curation.CurationSession (Python side: fabnb.views.widgets.QACurator).
// Every text from QA files goes through textContent, never innerHTML.

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function render({ model, el }) {
  const root = h("div", "fabnb-curation");
  root.tabIndex = 0;
  el.appendChild(root);
  const send = (msg) => model.send(msg);

  function editable(label, field, value) {
    const box = h("div", "fabnb-field");
    box.appendChild(h("div", "fabnb-label", label));
    const area = h("textarea", "fabnb-edit");
    area.dataset.field = field;
    area.value = value || "";
    area.addEventListener("change", () => send({ action: "edit", field, value: area.value }));
    box.appendChild(area);
    return box;
  }

  function draw() {
    const item = model.get("item") || {};
    const ids = model.get("ids");
    root.replaceChildren();

    const filters = h("div", "fabnb-filters");
    const options = model.get("options");
    for (const name of Object.keys(options)) {
      const sel = h("select", "fabnb-filter");
      sel.dataset.name = name;
      sel.appendChild(h("option", null, `any ${name.replace("_", " ")}`)).value = "";
      for (const v of options[name]) {
        const o = h("option", null, v);
        o.value = v;
        if (model.get("filters")[name] === v) o.selected = true;
        sel.appendChild(o);
      }
      sel.addEventListener("change", () => send({ action: "filter", name, value: sel.value }));
      filters.appendChild(sel);
    }
    filters.appendChild(h("span", "fabnb-saved", model.get("saved")));
    root.appendChild(filters);

    const table = h("table", "fabnb-targets");
    const header = table.insertRow();
    for (const c of ["test type", "kept / target", "dropped", "pending"]) header.appendChild(h("th", null, c));
    for (const p of model.get("progress")) {
      const row = table.insertRow();
      row.appendChild(h("td", null, p.test_type));
      row.appendChild(h("td", p.kept >= p.target && p.target > 0 ? "fabnb-met" : null, `${p.kept} / ${p.target}`));
      row.appendChild(h("td", null, p.dropped));
      row.appendChild(h("td", null, p.pending));
    }
    root.appendChild(table);

    const problems = model.get("problems");
    if (problems.length) {
      const det = h("details", "fabnb-problems");
      det.appendChild(h("summary", null, `${problems.length} file(s) could not be read`));
      for (const p of problems) det.appendChild(h("div", null, `${p.path}: ${p.message}`));
      root.appendChild(det);
    }
    if (model.get("error")) root.appendChild(h("div", "fabnb-error", model.get("error")));

    if (!item.test_id) {
      root.appendChild(h("div", "fabnb-empty", "No candidate matches these filters."));
      return;
    }
    root.appendChild(h("div", "fabnb-id",
      `${model.get("position") + 1} of ${ids.length} · ${item.test_id} · ${item.test_type} · ${item.question_format} · ` +
      `precision ${item.precision_level ?? "n/a"} · ${item.status}${item.edited.length ? " · edited: " + item.edited.join(", ") : ""}`));
    if (item.duplicates.length) {
      root.appendChild(h("div", "fabnb-dups", `Near-duplicates (shown next to each other): ${item.duplicates.join(", ")}`));
    }
    root.appendChild(editable("Question", "question", item.question));
    root.appendChild(editable("Reference answer", "ground_truth_answer", item.ground_truth_answer));
    const det = h("details", "fabnb-evidence");
    det.appendChild(h("summary", null, `Evidence (${item.evidence.length})`));
    for (const ev of item.evidence) {
      det.appendChild(h("div", "fabnb-source", `${ev.doc_id} · ${ev.section_title || ""}`));
      det.appendChild(h("div", "fabnb-passage", ev.evidence));
    }
    root.appendChild(det);

    const nav = h("div", "fabnb-nav");
    for (const [text, action] of [["◀ (p)", "prev"], ["Keep (k)", "keep"], ["Drop (d)", "drop"], ["Undo (u)", "reset"],
      ["(n) ▶", "next"], ["Export kept", "export"]]) {
      const b = h("button", "fabnb-" + action, text);
      b.type = "button";
      b.addEventListener("click", () => { send({ action }); root.focus(); });
      nav.appendChild(b);
    }
    root.appendChild(nav);
    root.appendChild(h("div", "fabnb-help", "Keys: k keep · d drop · u undo · n/p next/previous"));
  }

  root.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLTextAreaElement || e.target instanceof HTMLSelectElement) return;
    const action = { k: "keep", d: "drop", u: "reset", n: "next", p: "prev" }[e.key];
    if (action) {
      send({ action });
      e.preventDefault();
      e.stopPropagation();
    }
  });
  const names = ["item", "ids", "position", "progress", "saved", "error", "filters"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  root.focus();
  // Cleanup: the listeners go with the view, or a re-rendered cell keeps drawing into a removed node.
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
    root.remove();
  };
}

export default { render };
