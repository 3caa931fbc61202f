// fabnb inside JupyterLab: a "FAB-Bench" launcher section, Plan and Run on an experiment TOML, the runs
// sidebar, the results viewer (double-click a run's run.fabnb), the rating app and the doctor in tabs.
// Every panel is a view over fabnb's server extension; nothing here decides what a result means.
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, ICommandPalette, MainAreaWidget, Notification, showDialog, ToolbarButton } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ABCWidgetFactory, DocumentRegistry, DocumentWidget, IDocumentWidget } from '@jupyterlab/docregistry';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import { __, api, el, post, setTranslator, SETTINGS, table } from './api';
import { IRun, RunsPanel } from './runs';
import { RunStatus } from './status';
import { ResultsViewer } from './viewer';

const CATEGORY = 'FAB-Bench';
const FILE_TYPE = 'fabnb-run';
const FACTORY = 'FAB-Bench results';
const ICON = new LabIcon({
  name: 'fabnb:icon',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><rect x="3" y="12" width="4" height="9"/><rect x="10" y="7" width="4" height="14"/><rect x="17" y="3" width="4" height="18"/></g></svg>'
});
// The launcher's three cards, each its own picture: a new file, a star to rate, a medical cross for the doctor.
const NEW_ICON = new LabIcon({
  name: 'fabnb:new-experiment',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><path d="M5 2h10l4 4v16H5z" fill-opacity="0.35"/><rect x="11" y="9" width="2" height="10"/><rect x="7" y="13" width="10" height="2"/></g></svg>'
});
const RATE_ICON = new LabIcon({
  name: 'fabnb:rate',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><path d="M12 2l3 7h7l-5.5 4.5 2 7.5-6.5-4.5-6.5 4.5 2-7.5L2 9h7z"/></g></svg>'
});
const DOCTOR_ICON = new LabIcon({
  name: 'fabnb:doctor',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><rect x="10" y="3" width="4" height="18"/><rect x="3" y="10" width="18" height="4"/></g></svg>'
});

/** One system kind as the server's registry describes it (GET /fabnb/api/kinds). */
interface IKind {
  name: string;
  doc: string;
  missing: string | null;
  settings: { name: string; required: boolean; doc: string }[];
}

/** The New-experiment dialog's body: the experiment's name (its file and run folder) and the system kind of the
 * file's first system, with what each one is. */
class KindPicker extends Widget implements Dialog.IBodyWidget<{ kind: string; name: string }> {
  private select = el('select', '', 'fabnb-kind-select');
  private name = el('input', '', 'fabnb-experiment-name');

  constructor(kinds: IKind[]) {
    super();
    this.name.value = 'experiment';
    this.name.title = __('names the file (NAME.toml), the experiment and its run folder (fabnb-runs/NAME); a name in use gets -1, -2 ...');
    this.addClass('fabnb-lab');
    const about = el('p', '', 'fabnb-muted');
    for (const k of kinds) {
      const option = el('option', k.missing ? `${k.name} (not installed: ${k.missing})` : k.name);
      option.value = k.name;
      this.select.append(option);
    }
    const describe = () => {
      const k = kinds.find(x => x.name === this.select.value);
      const required = k ? k.settings.filter(s => s.required).map(s => s.name) : [];
      about.textContent = k ? k.doc + (required.length ? `. Settings to fill in: ${required.join(', ')}.` : '.') : '';
    };
    this.select.onchange = describe;
    describe();
    this.node.append(el('label', __('Name (the file, the experiment and its run folder):')), this.name,
      el('label', __('The offline example, with a system of this kind to fill in:')), this.select, about);
  }

  getValue(): { kind: string; name: string } {
    return { kind: this.select.value, name: this.name.value.trim() };
  }
}

const CMD = {
  newExperiment: 'fabnb:new-experiment',
  plan: 'fabnb:plan',
  run: 'fabnb:run',
  runs: 'fabnb:show-runs',
  open: 'fabnb:open-results',
  rate: 'fabnb:rate',
  doctor: 'fabnb:doctor',
  stop: 'fabnb:stop',
  planFile: 'fabnb:plan-file',
  runFile: 'fabnb:run-file',
  openRun: 'fabnb:open-run',
  compareWith: 'fabnb:compare-with'
};

class ResultsFactory extends ABCWidgetFactory<IDocumentWidget<ResultsViewer>> {
  protected createNewWidget(context: DocumentRegistry.Context): IDocumentWidget<ResultsViewer> {
    const folder = context.path.split('/').slice(0, -1).join('/');
    const widget = new DocumentWidget({ content: new ResultsViewer(folder || '.'), context });
    widget.title.icon = ICON;
    return widget;
  }
}

/** The plan of an experiment file (or its file/line/key error) in a side panel. */
class PlanPanel extends Widget {
  constructor() {
    super();
    this.id = 'fabnb-plan';
    this.addClass('fabnb-panel');
    this.addClass('fabnb-lab');
    this.title.icon = ICON;
    this.title.caption = __('FAB-Bench plan');
  }

  /** The plan of an experiment file; with ``probe`` its time measured (three short calls per endpoint, made by a
   * child process of the server, which starts the embedded model if the file names it). */
  async showPlan(path: string, probe = false): Promise<any> {
    const doing = probe ? __('measuring each endpoint (three short calls each; the embedded model starts first)...')
      : __('planning (no call is made)...');
    this.node.replaceChildren(el('h2', __('Plan: %1', path)), el('div', doing, 'fabnb-muted'));
    let p: any;
    try {
      p = await api('plan', {}, probe ? { file: path, probe: '1' } : { file: path });
    } catch (error) {
      p = { ok: false, error: String((error as Error).message) };
    }
    const parts: HTMLElement[] = [el('h2', __('Plan: %1', path))];
    if (!p.ok) {
      parts.push(el('pre', p.error, 'fabnb-error fabnb-plan-error'));
    } else {
      const time = p.rows.every((r: any) => r.seconds !== null && r.seconds !== undefined);
      parts.push(el('div', time ? __('time: from probes (the figure to trust on this machine)')
        : __('time: not measured yet (no run of this folder kept its probes)'), 'fabnb-plan-time'));
      if (!time) {
        const measure = el('button', __('Measure the time'), 'jp-Button fabnb-button fabnb-probe-button');
        measure.title = __('three short calls per endpoint, as fabnb run FILE --dry-run makes');
        measure.onclick = () => void this.showPlan(path, true);
        parts.push(measure);
      }
      parts.push(table(p.rows, ['system', 'stage', 'calls', 'done', 'todo', 'cost_usd', 'seconds']), el('pre', p.text, 'fabnb-plan-text'));
    }
    if (p.running) {
      parts.push(el('div', __('Running now: %1', p.running), 'fabnb-warning'));
    }
    if (p.ok && !p.output) {
      parts.push(el('div', __('Its run folder is outside this server\'s root: JupyterLab can neither run it nor list ' +
        'it in the runs sidebar. Name an output inside the root, or run it from a terminal and open it with ' +
        'fabnb explore DIR.'), 'fabnb-warning fabnb-outside-root'));
    }
    this.node.replaceChildren(...parts);
    return p;
  }
}

function folderOf(browser: IDefaultFileBrowser | null): string {
  return browser ? browser.model.path : '';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'fabnb-jupyterlab:plugin',
  description: 'FAB-Bench in JupyterLab: experiments, runs, results, ratings.',
  autoStart: true,
  requires: [ICommandPalette],
  optional: [ILauncher, IDefaultFileBrowser, ILayoutRestorer, ISettingRegistry, IStatusBar, ITranslator],
  activate: (app: JupyterFrontEnd, palette: ICommandPalette, launcher: ILauncher | null,
    browser: IDefaultFileBrowser | null, restorer: ILayoutRestorer | null, registry: ISettingRegistry | null,
    statusBar: IStatusBar | null, translator: ITranslator | null) => {
    const { commands, shell, docRegistry } = app;
    // Every string a user reads goes through JupyterLab's translator (the "fabnb" domain; English as written).
    const trans = (translator ?? nullTranslator).load('fabnb');
    setTranslator(trans);  // the panels' words too (runs.ts, viewer.ts, status.ts)

    docRegistry.addFileType({
      name: FILE_TYPE,
      displayName: 'FAB-Bench run',
      extensions: ['.fabnb'],
      mimeTypes: ['application/x-fabnb-run+json'],
      fileFormat: 'text',
      contentType: 'file',
      icon: ICON
    });
    const factory = new ResultsFactory({ name: FACTORY, fileTypes: [FILE_TYPE], defaultFor: [FILE_TYPE], readOnly: true });
    docRegistry.addWidgetFactory(factory);

    const openRun = (path: string) => commands.execute('docmanager:open', { path: `${path}/run.fabnb`, factory: FACTORY });
    const runs = new RunsPanel(
      (r: IRun) => void openRun(r.path),
      (r: IRun) => {
        if (!r.started_here && !started.has(r.path)) {
          return;
        }
        Notification.emit(`FAB-Bench run ${r.name} ended: ${r.state}`, r.state === 'finished' ? 'success' : 'warning', {
          autoClose: false,
          actions: [{ label: trans.__('Open results'), callback: () => void openRun(r.path) }]
        });
      },
      async (base: string, candidate: string) => {
        // The candidate's viewer, its "Compare with another run" set to the base and run.
        const widget = (await openRun(candidate)) as IDocumentWidget<ResultsViewer> | undefined;
        widget?.content.compareWith(base);
      },
      (list: IRun[]) => status?.seen(list)  // a run the sidebar sees going wakes the status bar's slower idle poll
    );
    runs.title.icon = ICON;
    shell.add(runs, 'left', { rank: 700 });
    restorer?.add(runs, 'fabnb-runs');
    const started = new Set<string>();

    const plan = new PlanPanel();
    const currentToml = (): string | null => {
      const w = shell.currentWidget as any;
      const path: string | undefined = w?.context?.path;
      return path && path.endsWith('.toml') ? path : null;
    };
    const showPlan = async (path: string) => {
      const w = shell.currentWidget as any;
      if (w?.context?.path === path) {
        await w.context.save();  // the shortcut plans what is on screen, as the toolbar's Plan does
      }
      if (!plan.isAttached) {
        shell.add(plan, 'right', { rank: 700 });
      }
      shell.activateById(plan.id);
      return plan.showPlan(path);
    };

    commands.addCommand(CMD.newExperiment, {
      label: trans.__('New experiment'),
      caption: trans.__('A commented FAB-Bench experiment file (the offline example), opened in the editor'),
      icon: NEW_ICON,
      execute: async () => {
        try {
          // The kinds come from the server's registry at each opening: a kind added in Python needs no rebuild here.
          const kinds = await api<IKind[]>('kinds');
          const answer = await showDialog({
            title: trans.__('New experiment'),
            body: new KindPicker(kinds),
            buttons: [Dialog.cancelButton(), Dialog.okButton({ label: trans.__('Create') })]
          });
          if (!answer.button.accept) {
            return;
          }
          const chosen = answer.value || { kind: '', name: '' };
          const made = await post('new', { folder: folderOf(browser), kind: chosen.kind,
            name: `${chosen.name || 'experiment'}.toml`, runs_folder: SETTINGS.runsFolder });
          await commands.execute('docmanager:open', { path: made.file, factory: 'Editor' });
        } catch (error) {
          Notification.error(String((error as Error).message));
        }
      }
    });
    commands.addCommand(CMD.plan, {
      label: trans.__('Plan experiment'),
      caption: trans.__('Calls, tokens, cost and time of the experiment file, without asking anything'),
      isEnabled: () => currentToml() !== null,
      execute: async (args: any) => {
        const path = (args.path as string) || currentToml();
        if (path) {
          await showPlan(path);
        }
      }
    });
    commands.addCommand(CMD.run, {
      label: trans.__('Run experiment'),
      caption: trans.__('Run the experiment file as a process of the Jupyter server (it survives a closed tab)'),
      isEnabled: () => currentToml() !== null,
      execute: async (args: any) => {
        const path = (args.path as string) || currentToml();
        if (!path) {
          return;
        }
        const w = shell.currentWidget as any;
        if (w?.context?.path === path) {
          await w.context.save();
        }
        const start = async (yes: boolean) => {
          const r = await post('runs', { file: path, yes, confirm_usd: SETTINGS.confirmUsd });
          started.add(r.output);
          Notification.info(`FAB-Bench run started: ${r.output}`, { autoClose: 4000 });
          shell.activateById(runs.id);
          await runs.refresh();
        };
        try {
          await start(false);
        } catch (error) {
          await showPlan(path);
          if ((error as any).data?.confirm) {
            // Above the one confirmation threshold (cost or time): the server says why; the user decides.
            const answer = await showDialog({
              title: trans.__('Start this run?'),
              body: (error as Error).message,
              buttons: [Dialog.cancelButton(), Dialog.okButton({ label: trans.__('Run it') })]
            });
            if (answer.button.accept) {
              try {
                await start(true);
              } catch (again) {
                Notification.error(`Run refused: ${(again as Error).message}`, { autoClose: false });
              }
            }
            return;
          }
          Notification.error(`Run refused: ${(error as Error).message}`, { autoClose: false });
        }
      }
    });
    commands.addCommand(CMD.runs, { label: trans.__('Show FAB-Bench runs'), execute: () => shell.activateById(runs.id) });
    commands.addCommand(CMD.open, {
      label: trans.__('Open FAB-Bench results'),
      execute: (args: any) => (args.path ? openRun(args.path as string) : shell.activateById(runs.id))
    });
    commands.addCommand(CMD.rate, {
      label: trans.__('Rate QA pairs'),
      caption: trans.__('The rating app (Voilà) in a tab: rate QA pairs with the keyboard; ratings are saved as you go'),
      icon: RATE_ICON,
      execute: async () => {
        let page: any;
        try {
          page = await post('rate', { folder: folderOf(browser) });
        } catch (error) {
          Notification.error(String((error as Error).message));
          return;
        }
        const content = new Widget();
        content.addClass('fabnb-frame');
        content.addClass('fabnb-lab');
        const frame = el('iframe');
        frame.src = URLExt.join(PageConfig.getBaseUrl(), 'voila', 'render', ...String(page.file).split('/').map(encodeURIComponent));
        content.node.append(frame);
        const tab = new MainAreaWidget({ content });
        tab.id = 'fabnb-rate';
        tab.title.label = trans.__('Rate QA pairs');
        tab.title.icon = RATE_ICON;
        tab.title.closable = true;
        shell.add(tab, 'main');
      }
    });
    commands.addCommand(CMD.doctor, {
      label: trans.__('Doctor'),
      caption: trans.__('What works on this machine (fabnb doctor)'),
      icon: DOCTOR_ICON,
      execute: async () => {
        const content = new Widget();
        content.addClass('fabnb-panel');
        content.addClass('fabnb-lab');
        content.node.append(el('div', __('checking...'), 'fabnb-muted'));
        const tab = new MainAreaWidget({ content });
        tab.title.label = trans.__('fabnb doctor');
        tab.title.icon = DOCTOR_ICON;
        tab.title.closable = true;
        shell.add(tab, 'main');
        try {
          const rows = await api<any[]>('doctor');
          content.node.replaceChildren(el('h2', __('fabnb doctor')), table(rows, Object.keys(rows[0] || {})));
        } catch (error) {
          content.node.replaceChildren(el('div', String((error as Error).message), 'fabnb-error'));
        }
      }
    });

    // Stop (Alt Shift S): the run going now that the sidebar lists first; a second Stop abandons its calls in flight.
    commands.addCommand(CMD.stop, {
      label: trans.__('Stop the FAB-Bench run going now'),
      execute: async () => {
        try {
          const r = (await api<IRun[]>('runs')).find(x => ['starting', 'running', 'stopping'].includes(x.state));
          if (!r) {
            Notification.info(trans.__('No FAB-Bench run is going.'), { autoClose: 3000 });
            return;
          }
          await post('runs/stop', { path: r.path });
          Notification.info(trans.__('Stopping %1 (again: abandon its calls in flight)', r.path), { autoClose: 4000 });
          shell.activateById(runs.id);
          await runs.refresh();
        } catch (error) {
          Notification.error(String((error as Error).message));
        }
      }
    });

    // The file browser's menu: Plan and Run on a .toml file, Open and Compare with… on a run's run.fabnb.
    const selected = (suffix: string): string | null => {
      // The item right-clicked (the selection may not have followed the click yet), else the selection's first.
      const node = app.contextMenuHitTest(n => n.classList?.contains('jp-DirListing-item'));
      const name = node?.querySelector('.jp-DirListing-itemText')?.textContent?.trim() ?? '';
      const item = browser?.selectedItems().next();
      const path = name && browser ? URLExt.join(browser.model.path, name)
        : item && !item.done ? item.value.path : '';
      return path.endsWith(suffix) ? path : null;
    };
    const folderOfFile = (path: string) => path.split('/').slice(0, -1).join('/');
    commands.addCommand(CMD.planFile, {
      label: trans.__('Plan (FAB-Bench)'),
      isVisible: () => selected('.toml') !== null,
      execute: () => { const p = selected('.toml'); return p ? showPlan(p) : undefined; }
    });
    commands.addCommand(CMD.runFile, {
      label: trans.__('Run (FAB-Bench)'),
      isVisible: () => selected('.toml') !== null,
      execute: () => { const p = selected('.toml'); return p ? commands.execute(CMD.run, { path: p }) : undefined; }
    });
    commands.addCommand(CMD.openRun, {
      label: trans.__('Open results'),
      isVisible: () => selected('run.fabnb') !== null,
      execute: () => { const p = selected('run.fabnb'); return p ? openRun(folderOfFile(p)) : undefined; }
    });
    commands.addCommand(CMD.compareWith, {
      label: trans.__('Compare with…'),
      isVisible: () => selected('run.fabnb') !== null,
      execute: async () => {
        const p = selected('run.fabnb');
        const widget = p ? (await openRun(folderOfFile(p))) as IDocumentWidget<ResultsViewer> | undefined : undefined;
        widget?.content.showCompare();
      }
    });
    const files = '.jp-DirListing-item[data-isdir="false"]';
    app.contextMenu.addItem({ command: CMD.planFile, selector: files, rank: 60 });
    app.contextMenu.addItem({ command: CMD.runFile, selector: files, rank: 61 });
    app.contextMenu.addItem({ command: CMD.openRun, selector: files, rank: 62 });
    app.contextMenu.addItem({ command: CMD.compareWith, selector: files, rank: 63 });

    // The status bar: the run going now; a click shows the runs (no status bar, as in Notebook 7: no item).
    const status = statusBar ? new RunStatus(() => shell.activateById(runs.id)) : null;
    if (statusBar && status) {
      statusBar.registerStatusItem('fabnb-jupyterlab:run-status', { item: status, align: 'left', rank: 900 });
    }

    // The settings (Settings Editor, "FAB-Bench"): read now and whenever they change.
    const apply = (settings: ISettingRegistry.ISettings) => {
      const c = settings.composite as any;
      SETTINGS.runsFolder = String(c.runsFolder ?? 'fabnb-runs');
      SETTINGS.pollSeconds = Number(c.pollSeconds ?? 2);
      SETTINGS.pageRows = Number(c.pageRows ?? 100);
      SETTINGS.confirmUsd = c.confirmUsd === null || c.confirmUsd === undefined ? null : Number(c.confirmUsd);
      runs.repoll();
      status?.repoll();
    };
    registry?.load(plugin.id).then(settings => {
      apply(settings);
      settings.changed.connect(apply);
    }).catch(error => console.warn(`fabnb: the FAB-Bench settings were not read (${error}); the defaults apply.`));

    for (const [command, rank] of [[CMD.newExperiment, 1], [CMD.rate, 2], [CMD.doctor, 3]] as [string, number][]) {
      launcher?.add({ command, category: CATEGORY, rank });
    }
    for (const command of Object.values(CMD)) {
      palette.addItem({ command, category: CATEGORY });
    }

    // Plan and Run on the toolbar of an experiment file open in the editor.
    docRegistry.addWidgetExtension('Editor', {
      createNew: (widget: any, context: DocumentRegistry.Context) => {
        if (!context.path.endsWith('.toml')) {
          return;
        }
        const planButton = new ToolbarButton({
          label: trans.__('Plan'),
          tooltip: 'FAB-Bench: save, then the plan of this experiment (no call is made)',
          onClick: () => void context.save().then(() => commands.execute(CMD.plan, { path: context.path }))
        });
        const runButton = new ToolbarButton({
          label: trans.__('Run'),
          tooltip: 'FAB-Bench: save, then run this experiment (a rerun resumes)',
          onClick: () => void context.save().then(() => commands.execute(CMD.run, { path: context.path }))
        });
        planButton.addClass('fabnb-plan-button');
        runButton.addClass('fabnb-run-button');
        widget.toolbar.insertItem(10, 'fabnb-plan', planButton);
        widget.toolbar.insertItem(11, 'fabnb-run', runButton);
      }
    });
  }
};

export default plugin;
