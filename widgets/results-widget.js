
// The notebook widget's entry to the renderer above (fabnb.views.widgets.ResultsExplorer): the summary and the
// cells are the model's; a part (a cell's texts, the questions' gold evidence) is asked of the kernel by its name.
function render({ model, el }) {
  const waiting = {};
  const heard = (msg) => {
    if (!msg || typeof msg.name !== "string" || !waiting[msg.name]) return;
    const done = waiting[msg.name]; delete waiting[msg.name]; done(msg.value);
  };
  model.on("msg:custom", heard);
  const load = (name) => new Promise((resolve) => { waiting[name] = resolve; model.send({ action: "load", name }); });
  const root = document.createElement("div");
  el.appendChild(root);
  renderResults(root, { summary: model.get("summary"), cells: model.get("cells"), load });
  const said = document.createElement("div");
  said.className = "fabnb-error";
  const error = () => { said.textContent = model.get("error") || ""; };
  model.on("change:error", error);
  el.appendChild(said);
  return () => { model.off("msg:custom", heard); model.off("change:error", error); root.remove(); said.remove(); };
}

export default { render };
