// The results viewer of one run folder: its summary (every mean with its coverage), the report's figures,
// the judged cells with the explorer's filters, one cell in full, two configurations side by side. It reads
// through the server extension (fabnb.jupyter.api.Results, the Explorer model), so it needs no kernel.
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';
import { api, el, post, table } from './api';

const KEYS = ['system', 'model', 'context_k', 'mode', 'test_id'];

export class ResultsViewer extends Widget {
  private head = el('div', '', 'fabnb-viewer-head');
  private summary = el('div', '', 'fabnb-summary');
  private figures = el('div', '', 'fabnb-figures');
  private filters = el('div', '', 'fabnb-filters');
  private rows = el('div', '', 'fabnb-rows');
  private pager = el('div', '', 'fabnb-pager');
  private detail = el('div', '', 'fabnb-detail');
  private compare = el('div', '', 'fabnb-compare');
  private runs = el('div', '', 'fabnb-compare-runs');
  private experts = el('div', '', 'fabnb-experts');
  private query: Record<string, string> = {};
  private page = 0;
  private info: any = null;

  constructor(private path: string) {
    super();
    this.addClass('fabnb-viewer');
    this.addClass('fabnb-lab');
    this.node.tabIndex = 0;
    this.title.label = `Results: ${path}`;
    this.node.append(this.head, this.summary, el('h3', 'The judge against experts'), this.experts, this.figures, el('h3', 'Judged cells'), this.filters, this.rows, this.pager,
      this.detail, el('h3', 'Two configurations'), this.compare, el('h3', 'Compare with another run'), this.runs);
    void this.load();
  }

  private say(where: HTMLElement, error: unknown): void {
    where.replaceChildren(el('div', String((error as Error).message || error), 'fabnb-error'));
  }

  async load(): Promise<void> {
    try {
      this.info = await api('results/summary', {}, { path: this.path });
    } catch (error) {
      this.head.replaceChildren(el('h2', this.path), el('div', String((error as Error).message), 'fabnb-error fabnb-viewer-problem'));
      return;
    }
    const s = this.info;
    this.title.label = `Results: ${s.name}`;
    this.head.replaceChildren(el('h2', `${s.name}`), el('div', `${s.path}: ${s.status.state}, ${s.cells} cells`, 'fabnb-muted'));
    for (const note of s.notes) {
      this.head.append(el('div', note, 'fabnb-warning'));
    }
    if (s.status.problem) {
      this.head.append(el('div', s.status.problem, 'fabnb-warning'));
    }
    const covColumns = ['system', 'context_k', 'mode', 'metric', 'shown'].filter(c => s.coverage.length && c in s.coverage[0]);
    const cov = s.coverage.length ? table(s.coverage, covColumns) : el('div', 'No coverage table yet (the report is written at the end of a run).', 'fabnb-muted');
    const md = el('pre', s.summary || 'No summary.md yet.', 'fabnb-summary-text');
    this.summary.replaceChildren(el('h3', 'Summary: every mean with its coverage (n/N)'), cov, el('details', '', ''));
    const details = this.summary.lastChild as HTMLElement;
    details.append(el('summary', 'summary.md'), md);
    const base = ServerConnection.makeSettings().baseUrl;
    this.figures.replaceChildren(...(s.figures.length ? [el('h3', 'Figures')] : []), ...s.figures.map((f: string) => {
      const img = el('img', '', 'fabnb-figure');
      img.src = URLExt.join(base, 'files', ...f.split('/').map(encodeURIComponent));
      img.alt = f;
      return img;
    }));
    this.drawFilters();
    this.drawCompare();
    void this.drawRuns();
    this.drawExperts();
    await this.loadRows();
  }

  private select(name: string, values: any[], label: string): HTMLElement {
    const wrap = el('label', `${label} `);
    const sel = el('select');
    sel.name = name;
    sel.append(el('option', 'all'));
    (sel.firstChild as HTMLOptionElement).value = '';
    for (const v of values) {
      const o = el('option', String(v));
      o.value = String(v);
      sel.append(o);
    }
    sel.onchange = () => this.set(name, sel.value);
    wrap.append(sel);
    return wrap;
  }

  private set(name: string, value: string): void {
    if (value) {
      this.query[name] = value;
    } else {
      delete this.query[name];
    }
    this.page = 0;
    void this.loadRows();
  }

  private drawFilters(): void {
    const s = this.info;
    const check = (name: string, label: string) => {
      const wrap = el('label', '');
      const box = el('input');
      box.type = 'checkbox';
      box.name = name;
      box.onchange = () => this.set(name, box.checked ? 'true' : '');
      wrap.append(box, document.createTextNode(` ${label}`));
      return wrap;
    };
    const num = (name: string, label: string) => {
      const wrap = el('label', `${label} `);
      const input = el('input');
      input.type = 'number';
      input.step = '0.1';
      input.min = '0';
      input.max = '1';
      input.name = name;
      input.onchange = () => this.set(name, input.value);
      wrap.append(input);
      return wrap;
    };
    const text = el('input', '', 'fabnb-text-filter');
    text.type = 'search';
    text.name = 'text';
    text.placeholder = 'text in question or answer';
    text.onchange = () => this.set('text', text.value);
    this.filters.replaceChildren(this.select('system', s.systems, 'system'), this.select('context_k', s.windows, 'context (K)'),
      this.select('mode', s.modes, 'mode'), this.select('metric', s.metrics, 'metric'), num('score_min', 'min'),
      num('score_max', 'max'), this.select('state', s.states, 'state'), check('judge_failures', 'judge failures'),
      check('retrieval_miss', 'retrieval misses'), text);
  }

  async loadRows(): Promise<void> {
    let page: any;
    const started = performance.now();
    try {
      page = await api('results/cells', {}, { path: this.path, page: String(this.page), filters: JSON.stringify(this.query) });
    } catch (error) {
      this.say(this.rows, error);
      return;
    }
    const columns = ['test_id', 'system', 'context_k', 'mode', 'state', 'average', ...this.info.metrics];
    this.rows.replaceChildren(table(page.rows, columns, row => void this.open(row)));
    this.rows.dataset.total = String(page.total);
    this.rows.dataset.ms = String(Math.round(performance.now() - started));
    const pages = Math.max(1, Math.ceil(page.total / page.page_size));
    const prev = el('button', 'Previous', 'jp-Button fabnb-button');
    prev.disabled = this.page === 0;
    prev.onclick = () => { this.page -= 1; void this.loadRows(); };
    const next = el('button', 'Next', 'jp-Button fabnb-button');
    next.disabled = this.page + 1 >= pages;
    next.onclick = () => { this.page += 1; void this.loadRows(); };
    this.pager.replaceChildren(prev, el('span', ` ${page.total} cells, page ${this.page + 1} of ${pages} `), next);
  }

  async open(row: any): Promise<void> {
    const key: any = {};
    for (const k of KEYS) {
      key[k] = row[k];
    }
    let d: any;
    try {
      d = await api('results/cell', {}, { path: this.path, key: JSON.stringify(key) });
    } catch (error) {
      this.say(this.detail, error);
      return;
    }
    const parts: HTMLElement[] = [el('h3', `${d.key.test_id}: ${d.key.system}, ${d.key.context_k}K, mode ${d.key.mode} (${d.state})`)];
    parts.push(el('h4', 'Question'), el('div', d.question, 'fabnb-text'));
    parts.push(el('h4', 'Expected answer'), el('div', d.expected, 'fabnb-text'));
    parts.push(el('h4', 'Answer'), el('div', d.answer || d.error, 'fabnb-text fabnb-answer'));
    parts.push(el('h4', 'Gold evidence'), el('div', d.gold_evidence, 'fabnb-text fabnb-gold'));
    parts.push(el('h4', `Retrieved passages (${d.sources.length})`));
    for (const src of d.sources) {
      const box = el('div', '', src.gold ? 'fabnb-source fabnb-gold' : 'fabnb-source');
      box.append(el('div', `#${src.rank} ${src.doc_id}${src.gold ? ' (gold)' : ''}`, 'fabnb-muted'), el('div', src.text, 'fabnb-text'));
      parts.push(box);
    }
    parts.push(el('h4', 'Scores'), table(d.scores, ['metric', 'score', 'status', 'reason']));
    this.detail.replaceChildren(...parts);
    this.detail.scrollIntoView?.({ block: 'nearest' });
  }

  // fabnb compare BASE CANDIDATE with this run as the candidate: the gate's verdict, what differs, every metric
  // and window, the items that got worse (a click opens the cell here). The server decides everything.
  private async drawRuns(): Promise<void> {
    let list: any[] = [];
    try {
      list = await api('runs');
    } catch (error) {
      this.say(this.runs, error);
      return;
    }
    const base = el('select');
    base.name = 'base';
    for (const r of list) {
      const o = el('option', `${r.name} (${r.path})`);
      o.value = r.path;
      base.append(o);
    }
    const margin = el('input');
    margin.type = 'number';
    margin.step = '0.01';
    margin.min = '0';
    margin.value = '0.02';
    margin.name = 'margin';
    const out = el('div');
    const go = el('button', 'Compare', 'jp-Button fabnb-button');
    go.onclick = async () => {
      out.replaceChildren(el('div', 'comparing…', 'fabnb-muted'));
      try {
        const c = await api('results/compare-runs', {}, { base: base.value, candidate: this.info.path, margin: margin.value });
        const worse = c.items.filter((r: any) => r.d < 0).slice(0, 20);
        out.replaceChildren(el('div', `verdict: ${c.verdict}`, `fabnb-verdict fabnb-verdict-${c.verdict.replace(/ /g, '-')}`),
          ...c.summary.map((line: string) => el('div', line)), ...c.notices.map((n: string) => el('div', n, 'fabnb-warning')),
          el('h4', 'What differs'), c.differences.length ? table(c.differences, ['what', 'base', 'candidate', 'kind']) : el('div', 'nothing recorded differs', 'fabnb-muted'),
          el('h4', 'Every metric and window (candidate - base)'),
          table(c.table, ['system', 'metric', 'context_k', 'mode', 'base_mean', 'candidate_mean', 'mean', 'ci_low', 'ci_high', 'n', 'claimed']),
          el('h4', 'Items that got worse (a click opens the cell)'),
          table(worse, ['system', 'context_k', 'mode', 'test_id', 'base', 'candidate', 'd'], row => void this.open({ ...row, model: this.modelOf(row) })));
      } catch (error) {
        this.say(out, error);
      }
    };
    this.runs.replaceChildren(el('span', 'base '), base, el('span', ' margin '), margin, go, out);
  }

  // The judge's calibration (fabnb.judge.calibration) as tables, and "Rate a sample of this run": the server draws
  // the study and writes its rating page, which Voilà renders here; experts score answers blind, 0-10.
  private drawExperts(): void {
    const k = this.info.calibration;
    const parts: HTMLElement[] = [];
    if (k) {
      for (const [metric, v] of Object.entries<any>(k.verdicts)) {
        parts.push(el('div', `${metric}: ${v.usable_alone ? 'the judge may be used alone' : 'not to be used alone'} (${v.why})`, 'fabnb-verdict'));
      }
      parts.push(table(k.agreement, ['metric', 'statistic', 'value', 'ci_low', 'ci_high', 'n_items', 'n_raters']));
      if (k.corrected_means) {
        parts.push(table(k.corrected_means, ['metric', 'judge_mean', 'judge_ci_low', 'judge_ci_high', 'estimate', 'ci_low', 'ci_high', 'n_rated']));
      }
    } else {
      parts.push(el('div', 'Not calibrated: no expert has scored this judge\'s answers yet.', 'fabnb-muted'));
    }
    const n = el('input');
    n.type = 'number';
    n.min = '2';
    n.name = 'sample';
    n.value = String(Math.min(60, this.info.cells));
    const raters = el('input');
    raters.name = 'raters';
    raters.value = 'expert-1,expert-2';
    const out = el('div');
    const go = el('button', 'Rate a sample of this run', 'jp-Button fabnb-button');
    go.onclick = async () => {
      try {
        const page = await post('results/rate-sample', { path: this.info.path, n: Number(n.value), raters: raters.value.split(',') });
        const frame = el('iframe', '', 'fabnb-rate-frame');
        frame.src = URLExt.join(PageConfig.getBaseUrl(), 'voila', 'render', ...String(page.file).split('/').map(encodeURIComponent));
        out.replaceChildren(el('div', `${page.n} answers for ${page.raters.join(', ')}; each enters their name below (keys 0-9, t for 10). Then: fabnb rate --from ${this.info.path}`, 'fabnb-muted'), frame);
      } catch (error) {
        this.say(out, error);
      }
    };
    this.experts.replaceChildren(...parts, el('span', 'answers '), n, el('span', ' raters '), raters, go, out);
  }

  private modelOf(row: any): string {
    const models = this.info.models || {};
    return models[row.system] || '';
  }

  private drawCompare(): void {
    const s = this.info;
    const configs: string[] = [];
    for (const sys of s.systems) {
      for (const w of s.windows) {
        for (const m of s.modes) {
          configs.push(JSON.stringify({ system: sys, context_k: w, mode: m }));
        }
      }
    }
    const pick = (name: string, index: number) => {
      const sel = el('select');
      sel.name = name;
      for (const c of configs) {
        const v = JSON.parse(c);
        const o = el('option', `${v.system}, ${v.context_k}K, ${v.mode}`);
        o.value = c;
        sel.append(o);
      }
      sel.selectedIndex = Math.min(index, configs.length - 1);
      return sel;
    };
    const a = pick('a', 0);
    const b = pick('b', 1);
    const out = el('div');
    const go = el('button', 'Compare', 'jp-Button fabnb-button');
    go.onclick = async () => {
      try {
        const t = await api('results/compare', {}, { path: this.path, a: a.value, b: b.value });
        out.replaceChildren(el('div', `${t.total} questions, largest drop from a to b first`, 'fabnb-muted'),
          table(t.rows, ['test_id', 'average_a', 'average_b', 'drop']));
      } catch (error) {
        this.say(out, error);
      }
    };
    this.compare.replaceChildren(el('span', 'a '), a, el('span', ' b '), b, go, out);
  }
}
