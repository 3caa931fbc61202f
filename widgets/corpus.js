// Corpus inspector: a view over fabnb.corpus.collection.CorpusSession (Python side: fabnb.views.widgets.CorpusInspector).
// Chunk text arrives as segments and is shown with textContent; terms are <mark> elements made here.

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

const fmt = (x, d = 3) => (typeof x === "number" ? x.toFixed(d) : "n/a");

function render({ model, el }) {
  const root = h("div", "fabnb-corpus");
  root.tabIndex = 0;
  el.appendChild(root);
  const send = (msg) => model.send(msg);

  function draw() {
    root.replaceChildren();
    const top = h("div", "fabnb-top");
    const docs = h("select", "fabnb-docs");
    for (const d of model.get("documents")) {
      const o = h("option", null, `${d.doc_id} (${d.n_chunks} chunks, density ${fmt(d.technical_density)})`);
      o.value = d.doc_id;
      if (d.doc_id === model.get("doc_id")) o.selected = true;
      docs.appendChild(o);
    }
    docs.addEventListener("change", () => send({ action: "doc", doc_id: docs.value }));
    top.appendChild(docs);
    const search = h("input", "fabnb-search");
    search.placeholder = "search chunks ( / )";
    search.value = model.get("query");
    search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") send({ action: "search", query: search.value });
      e.stopPropagation();
    });
    top.appendChild(search);
    root.appendChild(top);
    if (model.get("error")) root.appendChild(h("div", "fabnb-error", model.get("error")));

    const results = model.get("results");
    if (model.get("query")) {
      const box = h("div", "fabnb-results", results.length ? null : "no chunk contains this text");
      for (const r of results) {
        const line = h("div", "fabnb-result", `${r.chunk_id} (${r.hits}): …${r.snippet}…`);
        line.addEventListener("click", () => send({ action: "chunk", chunk_id: r.chunk_id }));
        box.appendChild(line);
      }
      root.appendChild(box);
    }

    const main = h("div", "fabnb-main");
    const list = h("div", "fabnb-chunks");
    const current = model.get("chunk") || {};
    for (const c of model.get("chunks")) {
      const line = h("div", "fabnb-chunk-row fabnb-" + c.precision_level + (c.chunk_id === current.chunk_id ? " fabnb-current" : ""),
        `#${c.position} ${c.precision_level} · ρ ${fmt(c.technical_density, 2)} · Flesch ${fmt(c.flesch_reading_ease, 0)}`);
      line.addEventListener("click", () => send({ action: "chunk", chunk_id: c.chunk_id }));
      list.appendChild(line);
    }
    main.appendChild(list);

    const view = h("div", "fabnb-view");
    view.appendChild(h("div", "fabnb-stats",
      `${current.chunk_id} · precision ${current.precision_level} · density ${fmt(current.technical_density)} · ` +
      `high-weight presence ${fmt(current.high_weight_presence, 1)} · Flesch ${fmt(current.flesch_reading_ease, 1)} · ${current.n_terms} terms`));
    const text = h("div", "fabnb-text");
    for (const s of current.segments || []) {
      if (s.term) {
        const m = h("mark", "fabnb-term fabnb-cat-" + String(s.category).replace(/[^a-z_-]/gi, ""), s.text);
        m.title = `${s.term}: ${s.categories.join(", ")}`;
        text.appendChild(m);
      } else {
        text.appendChild(document.createTextNode(s.text));
      }
    }
    view.appendChild(text);
    const ctx = current.contexts || [];
    view.appendChild(h("div", "fabnb-contexts", ctx.length
      ? "In contexts: " + ctx.map((c) => `${c.context_id} (${c.strategy}, ${c.role})`).join("; ")
      : "In no synthesized context"));
    main.appendChild(view);
    root.appendChild(main);
    root.appendChild(h("div", "fabnb-help", "Keys: n/p next/previous chunk · / search · click a term for its categories"));
  }

  root.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
    let handled = true;
    if (e.key === "n") send({ action: "next" });
    else if (e.key === "p") send({ action: "prev" });
    else if (e.key === "/") root.querySelector(".fabnb-search").focus();
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  });
  const names = ["documents", "doc_id", "chunks", "chunk", "results", "query", "error"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  // Cleanup: the listeners go with the view, or a re-rendered cell keeps drawing into a removed node.
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
    root.remove();
  };
}

export default { render };
