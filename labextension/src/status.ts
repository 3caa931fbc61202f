// The status bar's FAB-Bench item: the going run's stage, done/planned, ETA and spend; a click opens the runs
// sidebar. Empty when no run goes. What a run's state is, the server decides (fabnb.experiment.progress).
import { Widget } from '@lumino/widgets';
import { __, api, LIVE, seconds, SETTINGS } from './api';
import { IRun } from './runs';

export class RunStatus extends Widget {
  private timer = 0;

  constructor(private openRuns: () => void) {
    super();
    this.addClass('fabnb-status');
    this.node.title = __('FAB-Bench: the run going now (a click shows the runs)');
    this.node.onclick = () => this.openRuns();
    this.repoll();
  }

  /** Poll again now, then at the settings' interval while a run goes (called again when the setting changes). */
  repoll(): void {
    window.clearTimeout(this.timer);
    void this.refresh();
  }

  /** Each poll walks the server's root: at the settings' interval while a run goes, ten times slower when none
   * does (the item is there for the whole session, unlike the sidebar, which polls only while shown). */
  /** Another view saw ``runs`` (the sidebar's poll): a run going that this item has not shown yet makes it poll
   * at once, and at the fast interval from then on. */
  seen(runs: IRun[]): void {
    if (!this.node.textContent && runs.some(x => LIVE.includes(x.state))) {
      this.repoll();
    }
  }

  async refresh(): Promise<void> {
    let runs: IRun[] = [];
    try {
      runs = await api<IRun[]>('runs');
    } catch {
      // the next tick asks again
    }
    const r = runs.find(x => LIVE.includes(x.state));
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.refresh(), SETTINGS.pollSeconds * 1000 * (r ? 1 : 10));
    if (!r) {
      this.node.textContent = '';
      return;
    }
    const s = r.stages.find(x => x.state === 'in flight') || r.stages.find(x => x.state !== 'done');
    const stage = s ? ` ${s.stage} ${s.ok}/${s.planned}` : '';
    const eta = s && s.eta_s !== null && s.eta_s !== undefined ? `, ETA ${seconds(s.eta_s)}` : '';
    const spent = r.spent_usd !== null && r.spent_usd !== undefined ? `, $${r.spent_usd.toFixed(2)}` : '';
    this.node.textContent = __('FAB-Bench: %1 %2%3%4%5', r.name, r.label || r.state, stage, eta, spent);
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }
}
