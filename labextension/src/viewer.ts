// The results viewer of one run folder: its state and notes, then the run's results page in a frame (fabnb's one
// renderer, widgets/results.js: the summary, figures, every cell to filter, sort and open, two configurations side
// by side; the same page as fabnb export and fabnb explore), then what needs the server: the judge against experts
// ("Rate a sample of this run") and "Compare with another run". The page is made by the server extension
// (fabnb.jupyter.api.Results.page_file), so the viewer needs no kernel.
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';
import { __, api, el, post, SETTINGS, table } from './api';

// A run's path as one segment of the page's address (base64url), so the page's relative data/... stay under it.
export function pageKey(path: string): string {
  const bytes = new TextEncoder().encode(path);
  let text = '';
  bytes.forEach(b => { text += String.fromCharCode(b); });
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export class ResultsViewer extends Widget {
  private head = el('div', '', 'fabnb-viewer-head');
  private frame = el('iframe', '', 'fabnb-results-frame');
  private runs = el('div', '', 'fabnb-compare-runs');
  private experts = el('div', '', 'fabnb-experts');
  private info: any = null;
  private base: string | null = null;  // a base to compare with as soon as the runs are listed
  private live = el('div', '', 'fabnb-live');
  private timer = 0;
  private stored = -1;  // the calls the run had stored when the page was last made
  private wantCompare = false;  // "Compare with…" asked: focus the form once drawn

  constructor(private path: string) {
    super();
    this.addClass('fabnb-viewer');
    this.addClass('fabnb-lab');
    this.node.tabIndex = 0;
    this.title.label = __('Results: %1', path);
    this.frame.title = __('the run\'s results page');
    this.node.append(this.head, this.frame, el('h3', __('Rate a sample of this run (the judge against experts)')), this.experts, el('h3', __('Compare with another run')), this.runs);
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
    this.title.label = __('Results: %1', s.name);
    const reload = el('button', __('Reload'), 'jp-Button fabnb-button');
    reload.title = __('show what the run wrote since');
    reload.onclick = () => void this.load();
    this.head.replaceChildren(el('h2', `${s.name}`), el('div', __('%1: %2, %3 cells ', s.path, s.status.label || s.status.state, s.cells), 'fabnb-muted fabnb-viewer-state'), reload, this.live);
    for (const note of s.notes) {
      this.head.append(el('div', note, 'fabnb-warning'));
    }
    if (s.status.problem) {
      this.head.append(el('div', s.status.problem, 'fabnb-warning'));
    }
    this.showPage('');
    void this.drawRuns();
    this.drawExperts();
    window.clearInterval(this.timer);
    this.live.replaceChildren();
    if (['running', 'stopping', 'starting'].includes(s.status.state)) {
      this.stored = -1;
      this.timer = window.setInterval(() => void this.watch(), Math.max(4, SETTINGS.pollSeconds) * 1000);
      void this.watch();
    }
  }

  /** While the run goes: its stages in the head, and the page made again as cells are stored (not while a cell is
   * open in it or a filter is being typed, which a new page would close); the whole view once it has ended. */
  private async watch(): Promise<void> {
    let r: any;
    try {
      r = ((await api<any[]>('runs')) || []).find(x => x.path === this.info.path);
    } catch {
      return;  // the next tick asks again
    }
    if (!r || !['running', 'stopping', 'starting'].includes(r.state)) {
      window.clearInterval(this.timer);
      void this.load();
      return;
    }
    const stages = (r.stages || []).map((x: any) => `${x.stage} ${x.ok}/${x.planned} ${x.state}`).join(', ');
    const stored = (r.stages || []).reduce((n: number, x: any) => n + x.ok + x.failed, 0);
    const doc = this.frame.contentDocument;
    const busy = !!doc && (!!doc.querySelector('[data-part=detail]:not([hidden])') ||
      (doc.activeElement?.matches?.('input, select') ?? false));
    if (stored !== this.stored && !busy) {
      this.stored = stored;
      this.showPage('');
    }
    this.live.replaceChildren(el('div', __('live: %1; %2. The cells below are made again as answers and scores are ' +
      'stored (not while a cell is open).', r.label || r.state, stages), 'fabnb-warning'));
  }

  dispose(): void {
    window.clearInterval(this.timer);
    super.dispose();
  }

  /** "Compare with…" (the file browser's menu on run.fabnb): the comparison's form, in view, for a base to pick. */
  showCompare(): void {
    this.wantCompare = true;  // the form may not be drawn yet (the runs are being listed): drawRuns focuses it
    const select = this.runs.querySelector('select');
    if (select) {
      this.runs.scrollIntoView?.({ block: 'nearest' });
      select.focus();
    }
  }

  /** Compare this run (the candidate) with ``base`` (a run's folder), as "Compare" in the runs sidebar asks. */
  compareWith(base: string): void {
    this.base = base;
    if (this.info) {
      void this.drawRuns();
    }
  }

  // The page in the frame; a cell (an item of a comparison) opens there by the address's #cell=.
  private showPage(cell: string): void {
    const base = ServerConnection.makeSettings().baseUrl;
    const url = URLExt.join(base, 'fabnb', 'page', pageKey(this.info.path), 'index.html');
    this.frame.src = `${url}?t=${Date.now()}&rows=${SETTINGS.pageRows}${cell ? '#cell=' + encodeURIComponent(cell) : ''}`;
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
    const go = el('button', __('Compare'), 'jp-Button fabnb-button');
    go.onclick = async () => {
      out.replaceChildren(el('div', __('comparing…'), 'fabnb-muted'));
      try {
        const c = await api('results/compare-runs', {}, { base: base.value, candidate: this.info.path, margin: margin.value });
        const worse = c.items.filter((r: any) => r.d < 0).slice(0, 20);
        out.replaceChildren(el('div', __('verdict: %1', c.verdict), `fabnb-verdict fabnb-verdict-${c.verdict.replace(/ /g, '-')}`),
          ...c.summary.map((line: string) => el('div', line)), ...c.notices.map((n: string) => el('div', n, 'fabnb-warning')),
          el('h4', __('What differs')), c.differences.length ? table(c.differences, ['what', 'base', 'candidate', 'kind']) : el('div', __('nothing recorded differs'), 'fabnb-muted'),
          el('h4', __('Every metric and window (candidate - base)')),
          table(c.table, ['system', 'metric', 'context_k', 'mode', 'base_mean', 'candidate_mean', 'mean', 'ci_low', 'ci_high', 'n', 'claimed']),
          el('h4', __('Items that got worse (a click opens the cell in the page above)')),
          table(worse, ['system', 'context_k', 'mode', 'test_id', 'base', 'candidate', 'd'], row => this.showPage([row.system, row.context_k, row.mode, row.test_id].join('|'))));
      } catch (error) {
        this.say(out, error);
      }
    };
    this.runs.replaceChildren(el('span', __('base ')), base, el('span', __(' margin ')), margin, go, out);
    if (this.wantCompare) {
      this.wantCompare = false;
      this.runs.scrollIntoView?.({ block: 'nearest' });
      base.focus();
    }
    if (this.base !== null) {
      base.value = this.base;
      this.base = null;
      this.runs.scrollIntoView?.({ block: 'nearest' });
      go.click();
    }
  }

  // "Rate a sample of this run": the server draws the study and writes its rating page, which Voilà renders here;
  // experts score answers blind, 0-10. The calibration it yields is drawn in the page above, with the rest.
  private drawExperts(): void {
    const parts: HTMLElement[] = [];
    if (!this.info.calibration) {
      parts.push(el('div', __('Not calibrated: no expert has scored this judge\'s answers yet.'), 'fabnb-muted'));
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
    const go = el('button', __('Rate a sample of this run'), 'jp-Button fabnb-button');
    go.onclick = async () => {
      try {
        const page = await post('results/rate-sample', { path: this.info.path, n: Number(n.value), raters: raters.value.split(',') });
        const frame = el('iframe', '', 'fabnb-rate-frame');
        frame.src = URLExt.join(PageConfig.getBaseUrl(), 'voila', 'render', ...String(page.file).split('/').map(encodeURIComponent));
        out.replaceChildren(el('div', __('%1 answers for %2; each enters their name below (keys 0-9, t for 10). Then: fabnb rate --from %3', page.n, page.raters.join(', '), this.info.path), 'fabnb-muted'), frame);
      } catch (error) {
        this.say(out, error);
      }
    };
    this.experts.replaceChildren(...parts, el('span', __('answers ')), n, el('span', __(' raters ')), raters, go, out);
  }
}
