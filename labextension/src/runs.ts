// The "FAB-Bench runs" sidebar: every run under the server's root with its live status, polled while shown.
// What a run's state is, is decided by fabnb.experiment.progress.run_status on the server.
import { Widget } from '@lumino/widgets';
import { __, api, el, LIVE, post, seconds, SETTINGS } from './api';

export interface IRun {
  path: string;
  name: string;
  state: string;
  label: string | null;
  holder: string | null;
  stages: { stage: string; planned: number; ok: number; failed: number; state: string; eta_s?: number | null }[];
  progress: { stage: string; done: number; total: number; eta_s: number | null; in_flight?: number | null } | null;
  spent_usd: number | null;
  cause: string | null;
  problem: string | null;
  experiment_file: string | null;
  started_here: boolean;
}

export class RunsPanel extends Widget {
  private list = el('div', '', 'fabnb-runs-list');
  private status = el('div', '', 'fabnb-muted');
  private timer = 0;
  private last: Map<string, string> = new Map();
  // Two runs picked to compare, in the order picked: the first is the base, the second the candidate.
  private picked: string[] = [];
  private compareBox = el('div', '', 'fabnb-pick');
  // The order shown: kept while the panel is open (a run that ends stays where it was), a new run on top; the
  // server's order (live first, newest first) on Refresh.
  private order: string[] = [];
  // Runs whose Stop was clicked here: "stopping…" at once, before the next poll says so.
  private stopAsked: Set<string> = new Set();

  constructor(
    private open: (run: IRun) => void,
    private onEnded: (run: IRun) => void,
    private compare: (base: string, candidate: string) => void = () => undefined,
    private polled: (runs: IRun[]) => void = () => undefined  // what each poll found (the status bar listens)
  ) {
    super();
    this.id = 'fabnb-runs';
    this.addClass('fabnb-panel');
    this.addClass('fabnb-lab');
    this.title.caption = __('FAB-Bench runs');
    const refresh = el('button', __('Refresh'), 'jp-Button fabnb-button');
    refresh.onclick = () => {
      this.order = [];
      void this.refresh();
    };
    this.node.append(el('h2', __('FAB-Bench runs')), refresh, this.compareBox, this.status, this.list,
      el('div', __('Listed: the runs under this server\'s root, up to 4 folders down (hidden folders skipped). A run ') +
        'elsewhere is not listed: fabnb explore DIR opens it.', 'fabnb-muted fabnb-runs-where'));
    this.drawPicked();
  }

  /** "Compare": enabled once two runs are picked (the first picked is the base). */
  private drawPicked(): void {
    const go = el('button', __('Compare the two picked'), 'jp-Button fabnb-button fabnb-compare-picked');
    go.disabled = this.picked.length !== 2;
    go.onclick = () => this.compare(this.picked[0], this.picked[1]);
    const said = this.picked.length === 2 ? __('base %1, candidate %2', this.picked[0], this.picked[1])
      : __('pick two finished runs to compare (the first picked is the base)');
    this.compareBox.replaceChildren(go, el('div', said, 'fabnb-muted'));
  }

  private pick(path: string, on: boolean): void {
    this.picked = this.picked.filter(p => p !== path);
    if (on) {
      this.picked.push(path);
    }
    this.picked = this.picked.slice(-2);  // a third pick drops the oldest
    this.drawPicked();
    for (const box of Array.from(this.list.querySelectorAll<HTMLInputElement>('input.fabnb-pick-run'))) {
      box.checked = this.picked.includes(box.value);
    }
  }

  protected onAfterShow(): void {
    void this.refresh();
    this.repoll();
  }

  /** Poll at the settings' interval while shown (called again when the setting changes). */
  repoll(): void {
    window.clearInterval(this.timer);
    if (this.isVisible) {
      this.timer = window.setInterval(() => void this.refresh(), SETTINGS.pollSeconds * 1000);
    }
  }

  protected onAfterHide(): void {
    window.clearInterval(this.timer);
  }

  dispose(): void {
    window.clearInterval(this.timer);
    super.dispose();
  }

  /** Ask for the runs once (also called after Run, so a new run shows at once). */
  async refresh(): Promise<void> {
    let runs: IRun[];
    try {
      runs = await api<IRun[]>('runs');
    } catch (error) {
      this.status.textContent = String((error as Error).message);
      return;
    }
    for (const r of runs) {
      const before = this.last.get(r.path);
      const live = (state?: string) => LIVE.includes(state || '');
      if (live(before) && !live(r.state)) {
        this.onEnded(r);
      }
      this.last.set(r.path, r.state);
    }
    this.status.textContent = runs.length ? '' : __('No runs under this folder yet: open an experiment file and press Run.');
    this.picked = this.picked.filter(p => runs.some(r => r.path === p));  // a run gone from the root is unpicked
    this.list.replaceChildren(...this.steady(runs).map(r => this.item(r)));
    this.polled(runs);
  }

  /** The runs in the order already shown, the new ones (in the server's order) on top. */
  private steady(runs: IRun[]): IRun[] {
    const known = new Set(this.order);
    const fresh = runs.filter(r => !known.has(r.path)).map(r => r.path);
    this.order = [...fresh, ...this.order].filter(p => runs.some(r => r.path === p));
    return this.order.map(p => runs.find(r => r.path === p) as IRun);
  }

  /** A button that posts to the server, says any refusal in the panel, then refreshes the list. */
  private action(label: string, endpoint: string, body: any): HTMLButtonElement {
    const button = el('button', label, 'jp-Button fabnb-button');
    button.onclick = async () => {
      try {
        await post(endpoint, body);
      } catch (error) {
        this.status.textContent = String((error as Error).message);
      }
      void this.refresh();
    };
    return button;
  }

  /** Stop: "stopping…" from the click; a second click abandons the calls still in flight. */
  private stopButton(r: IRun): HTMLButtonElement {
    const again = r.state === 'stopping' || this.stopAsked.has(r.path);
    const button = this.action(again ? __('Abandon calls in flight') : __('Stop'), 'runs/stop', { path: r.path });
    button.classList.add(again ? 'fabnb-abandon' : 'fabnb-stop');
    const send = button.onclick as () => Promise<void>;
    button.onclick = () => {
      this.stopAsked.add(r.path);
      const card = button.closest('.fabnb-run');
      const state = card?.querySelector('.fabnb-run-state');
      if (state) {
        state.textContent = ' ' + __('stopping…');
      }
      card?.classList.add('fabnb-state-stopping');
      return send();
    };
    return button;
  }

  private item(r: IRun): HTMLElement {
    const live = r.state === 'running' || r.state === 'starting' || r.state === 'stopping';
    if (!live) {
      this.stopAsked.delete(r.path);
    }
    const state = live && this.stopAsked.has(r.path) ? 'stopping' : r.state;
    const label = state === 'stopping' ? 'stopping…' : (r.label || r.state);
    const box = el('div', '', `fabnb-run fabnb-state-${state.replace(/[^a-z-]/g, '')}`);
    box.dataset.path = r.path;
    box.dataset.state = state;
    const title = el('button', r.name, 'fabnb-run-name');
    title.title = __('Open %1', r.path);
    title.onclick = () => this.open(r);
    const pick = el('input', '', 'fabnb-pick-run');
    pick.type = 'checkbox';
    pick.value = r.path;
    pick.title = __('pick to compare (fabnb compare)');
    pick.checked = this.picked.includes(r.path);
    pick.onchange = () => this.pick(r.path, pick.checked);
    box.append(pick, title, el('span', ` ${label}`, 'fabnb-run-state'));
    box.append(el('div', r.path, 'fabnb-muted fabnb-run-folder'));  // two runs of one name told apart
    // One vocabulary with the CLI and the magics: per stage, the plan's done and planned calls.
    for (const s of r.stages) {
      const eta = s.state === 'in flight' && s.eta_s !== null && s.eta_s !== undefined ? `, ETA ${seconds(s.eta_s)}` : '';
      box.append(el('div', `${s.stage}: ${s.ok}/${s.planned} ${s.state}${eta}${s.failed ? `, ${s.failed} failed` : ''}`,
        'fabnb-run-stage'));
    }
    const flying = r.progress?.in_flight;
    if (state === 'stopping' && flying !== null && flying !== undefined) {
      box.append(el('div', __('stopping: %1 call(s) in flight finishing; their answers are kept', flying), 'fabnb-run-progress'));
    }
    if (r.spent_usd !== null && r.spent_usd !== undefined) {
      box.append(el('div', __('spent $%1', r.spent_usd.toFixed(4)), 'fabnb-muted'));
    }
    if (r.problem || r.cause) {
      box.append(el('div', r.problem || r.cause || '', 'fabnb-error'));
    }
    if (live) {
      box.append(this.stopButton(r));
    } else if (r.experiment_file && r.state !== 'finished' && r.state !== 'ending') {
      box.append(this.action(__('Resume'), 'runs', { file: r.experiment_file }));
    }
    return box;
  }
}
