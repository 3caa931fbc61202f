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

  /** Poll at the settings' interval (called again when the setting changes). */
  repoll(): void {
    window.clearInterval(this.timer);
    void this.refresh();
    this.timer = window.setInterval(() => void this.refresh(), SETTINGS.pollSeconds * 1000);
  }

  async refresh(): Promise<void> {
    let runs: IRun[];
    try {
      runs = await api<IRun[]>('runs');
    } catch {
      return;  // the next tick asks again
    }
    const r = runs.find(x => LIVE.includes(x.state));
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
    window.clearInterval(this.timer);
    super.dispose();
  }
}
