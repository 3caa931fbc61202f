// Rating panel: a view over fabnb.qa.rating.RatingSession (Python side: fabnb.views.widgets.RatingPanel).
// Every text from QA files or LLM output goes through textContent, never innerHTML.

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function render({ model, el }) {
  const root = h("div", "fabnb-rating");
  root.tabIndex = 0;
  el.appendChild(root);
  let active = 0; // the highlighted dimension, which the number keys rate

  const send = (msg) => model.send(msg);

  function draw() {
    const dims = model.get("dimensions");
    const item = model.get("item") || {};
    const scores = model.get("scores") || {};
    root.replaceChildren();

    const head = h("div", "fabnb-head");
    head.appendChild(h("span", "fabnb-progress",
      // "rated" counts items with every dimension scored; this item's own count is beside it, so two scores of
      // four never read as "0 rated" alone.
      `Item ${model.get("position") + 1} of ${model.get("total")} · ${model.get("done")} rated in full · ` +
      `this item: ${dims.filter((d) => scores[d.name] !== undefined && scores[d.name] !== null).length} of ${dims.length} scored`));
    head.appendChild(h("span", "fabnb-rater", `rater: ${model.get("rater")}${model.get("blind") ? " · blind" : ""}`));
    const saved = h("span", "fabnb-saved", model.get("saved"));
    head.appendChild(saved);
    root.appendChild(head);
    const bar = h("div", "fabnb-bar");
    const fill = h("div", "fabnb-bar-fill");
    fill.style.width = `${(100 * model.get("done")) / Math.max(1, model.get("total"))}%`;
    bar.appendChild(fill);
    root.appendChild(bar);

    if (model.get("error")) root.appendChild(h("div", "fabnb-error", model.get("error")));

    const body = h("div", "fabnb-item");
    body.appendChild(h("div", "fabnb-id", [item.item_id, item.test_type, item.question_format].filter(Boolean).join(" · ")));
    // What to show comes from the model: [label, field, css class] (QA pairs and oracle verdicts differ).
    for (const [label, key, css] of model.get("fields") || []) {
      if (typeof item[key] !== "string" || !item[key]) continue;
      body.appendChild(h("div", "fabnb-label", label));
      body.appendChild(h("div", css, item[key]));
    }
    const evidence = Array.isArray(item.evidence) ? item.evidence : [];
    if (evidence.length) {
      const det = h("details", "fabnb-evidence");
      det.appendChild(h("summary", null, `Evidence (${evidence.length} passage${evidence.length > 1 ? "s" : ""})`));
      for (const ev of evidence) {
        det.appendChild(h("div", "fabnb-source", `${ev.doc_id} · ${ev.section_title || ""}`));
        det.appendChild(h("div", "fabnb-passage", ev.evidence));
      }
      body.appendChild(det);
    }
    if (!model.get("blind") && item.generation_metadata) {
      body.appendChild(h("div", "fabnb-meta", JSON.stringify(item.generation_metadata)));
    }
    root.appendChild(body);

    const grid = h("div", "fabnb-dims");
    dims.forEach((d, i) => {
      const row = h("div", "fabnb-dim" + (i === active ? " fabnb-active" : ""));
      row.dataset.dimension = d.name;
      const label = h("div", "fabnb-dim-label");
      label.appendChild(h("b", null, d.name));
      label.appendChild(h("span", "fabnb-def", d.definition));
      if (d.low || d.high) {
        const sc = model.get("scale");
        const ends = h("div", "fabnb-anchors");
        ends.appendChild(h("span", "fabnb-anchor-low", sc[0] + " = " + d.low));
        ends.appendChild(h("span", "fabnb-anchor-high", sc[sc.length - 1] + " = " + d.high));
        label.appendChild(ends);
      }
      label.addEventListener("click", () => { active = i; draw(); root.focus(); });
      row.appendChild(label);
      const buttons = h("div", "fabnb-scores");
      for (const v of model.get("scale")) {
        const b = h("button", "fabnb-score" + (scores[d.name] === v ? " fabnb-chosen" : ""), v);
        b.type = "button";
        b.dataset.value = String(v);
        b.addEventListener("click", () => {
          active = i;
          send({ action: "rate", dimension: d.name, value: v });
          root.focus();
        });
        buttons.appendChild(b);
      }
      row.appendChild(buttons);
      grid.appendChild(row);
    });
    root.appendChild(grid);
    if (model.get("anchors_source")) root.appendChild(h("div", "fabnb-anchors-source", model.get("anchors_source")));

    const comment = h("textarea", "fabnb-comment");
    const limit = model.get("max_comment");
    comment.placeholder = `Comment (saved when you leave the box; at most ${limit.toLocaleString()} characters)`;
    comment.maxLength = limit;  // the store refuses a longer one: the box stops typing at the limit
    comment.value = model.get("comment");
    const left = h("div", "fabnb-comment-count");
    const count = () => { left.textContent = `${comment.value.length.toLocaleString()} / ${limit.toLocaleString()}`; };
    comment.addEventListener("input", count);
    comment.addEventListener("change", () => send({ action: "comment", text: comment.value }));
    count();
    root.appendChild(comment);
    root.appendChild(left);

    const nav = h("div", "fabnb-nav");
    const buttons = [["◀ Previous (p)", "prev"], ["Next unrated (u)", "unrated"], ["Next (n) ▶", "next"],
      ["Download my ratings (CSV)", "download"]];
    for (const [text, action] of buttons) {
      const b = h("button", "fabnb-" + action, text);
      b.type = "button";
      b.addEventListener("click", () => { send({ action }); root.focus(); });
      nav.appendChild(b);
    }
    root.appendChild(nav);
    const scale = model.get("scale");
    const ten = scale.includes(10) ? " (t for 10)" : "";
    root.appendChild(h("div", "fabnb-help", "Keys: " + scale[0] + "-" + Math.min(9, scale[scale.length - 1]) + ten + " score the highlighted dimension, and the highlight moves to the next one · ↑/↓ choose a dimension · n/p next/previous · u next unrated"));
  }

  root.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLTextAreaElement || e.target instanceof HTMLInputElement) return;
    const dims = model.get("dimensions");
    let handled = true;
    // One key per score: 0-9, and t for 10 on the judge's 0-10 scale (experts scoring answers).
    const value = e.key === "t" ? 10 : (/^[0-9]$/.test(e.key) ? Number(e.key) : null);
    if (value !== null && model.get("scale").includes(value)) {
      send({ action: "rate", dimension: dims[active].name, value: value });
      active = Math.min(active + 1, dims.length - 1);
    } else if (e.key === "n") { active = 0; send({ action: "next" }); }
    else if (e.key === "p") { active = 0; send({ action: "prev" }); }
    else if (e.key === "u") { active = 0; send({ action: "unrated" }); }
    else if (e.key === "ArrowDown") { active = Math.min(active + 1, dims.length - 1); draw(); }
    else if (e.key === "ArrowUp") { active = Math.max(active - 1, 0); draw(); }
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  });

  const onMessage = (msg) => {
    if (msg && msg.kind === "download") {
      const url = URL.createObjectURL(new Blob([msg.content], { type: "text/csv" }));
      const a = h("a");
      a.href = url;
      a.download = msg.filename;
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    }
  };
  model.on("msg:custom", onMessage);
  const names = ["item", "scores", "comment", "position", "done", "saved", "error", "blind"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  root.focus();
  // Cleanup: the listeners go with the view, or a re-rendered cell keeps drawing into a removed node.
  return () => {
    model.off("msg:custom", onMessage);
    for (const name of names) model.off(`change:${name}`, draw);
    root.remove();
  };
}

export default { render };
