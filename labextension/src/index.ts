// fabnb inside JupyterLab: a "FAB-Bench" launcher section, Plan and Run on an experiment TOML, the runs
// sidebar, the results viewer (double-click a run's run.fabnb), the rating app and the doctor in tabs.
// Every panel is a view over fabnb's server extension; nothing here decides what a result means.
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, ICommandPalette, MainAreaWidget, Notification, showDialog, ToolbarButton } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ABCWidgetFactory, DocumentRegistry, DocumentWidget, IDocumentWidget } from '@jupyterlab/docregistry';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import { api, el, post, table } from './api';
import { IRun, RunsPanel } from './runs';
import { ResultsViewer } from './viewer';

const CATEGORY = 'FAB-Bench';
const FILE_TYPE = 'fabnb-run';
const FACTORY = 'FAB-Bench results';
const ICON = new LabIcon({
  name: 'fabnb:icon',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><rect x="3" y="12" width="4" height="9"/><rect x="10" y="7" width="4" height="14"/><rect x="17" y="3" width="4" height="18"/></g></svg>'
});

/** One system kind as the server's registry describes it (GET /fabnb/api/kinds). */
interface IKind {
  name: string;
  doc: string;
  missing: string | null;
  settings: { name: string; required: boolean; doc: string }[];
}

/** The New-experiment dialog's body: the system kind of the file's first system, with what each one is. */
class KindPicker extends Widget implements Dialog.IBodyWidget<string> {
  private select = el('select', '', 'fabnb-kind-select');

  constructor(kinds: IKind[]) {
    super();
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
    this.node.append(el('label', 'The offline example, with a system of this kind to fill in:'), this.select, about);
  }

  getValue(): string {
    return this.select.value;
  }
}

const CMD = {
  newExperiment: 'fabnb:new-experiment',
  plan: 'fabnb:plan',
  run: 'fabnb:run',
  runs: 'fabnb:show-runs',
  open: 'fabnb:open-results',
  rate: 'fabnb:rate',
  doctor: 'fabnb:doctor'
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
    this.title.caption = 'FAB-Bench plan';
  }

  async showPlan(path: string): Promise<any> {
    this.node.replaceChildren(el('h2', `Plan: ${path}`), el('div', 'planning (no call is made)...', 'fabnb-muted'));
    let p: any;
    try {
      p = await api('plan', {}, { file: path });
    } catch (error) {
      p = { ok: false, error: String((error as Error).message) };
    }
    const parts: HTMLElement[] = [el('h2', `Plan: ${path}`)];
    if (!p.ok) {
      parts.push(el('pre', p.error, 'fabnb-error fabnb-plan-error'));
    } else {
      parts.push(table(p.rows, ['system', 'stage', 'calls', 'done', 'todo', 'cost_usd', 'seconds']), el('pre', p.text, 'fabnb-plan-text'));
    }
    if (p.running) {
      parts.push(el('div', `Running now: ${p.running}`, 'fabnb-warning'));
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
  optional: [ILauncher, IDefaultFileBrowser, ILayoutRestorer],
  activate: (app: JupyterFrontEnd, palette: ICommandPalette, launcher: ILauncher | null,
    browser: IDefaultFileBrowser | null, restorer: ILayoutRestorer | null) => {
    const { commands, shell, docRegistry } = app;

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
          actions: [{ label: 'Open results', callback: () => void openRun(r.path) }]
        });
      },
      async (base: string, candidate: string) => {
        // The candidate's viewer, its "Compare with another run" set to the base and run.
        const widget = (await openRun(candidate)) as IDocumentWidget<ResultsViewer> | undefined;
        widget?.content.compareWith(base);
      }
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
      if (!plan.isAttached) {
        shell.add(plan, 'right', { rank: 700 });
      }
      shell.activateById(plan.id);
      return plan.showPlan(path);
    };

    commands.addCommand(CMD.newExperiment, {
      label: 'New experiment',
      caption: 'A commented FAB-Bench experiment file (the offline example), opened in the editor',
      icon: ICON,
      execute: async () => {
        try {
          // The kinds come from the server's registry at each opening: a kind added in Python needs no rebuild here.
          const kinds = await api<IKind[]>('kinds');
          const answer = await showDialog({
            title: 'New experiment',
            body: new KindPicker(kinds),
            buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Create' })]
          });
          if (!answer.button.accept) {
            return;
          }
          const made = await post('new', { folder: folderOf(browser), kind: answer.value || '' });
          await commands.execute('docmanager:open', { path: made.file, factory: 'Editor' });
        } catch (error) {
          Notification.error(String((error as Error).message));
        }
      }
    });
    commands.addCommand(CMD.plan, {
      label: 'Plan experiment',
      caption: 'Calls, tokens, cost and time of the experiment file, without asking anything',
      isEnabled: () => currentToml() !== null,
      execute: async (args: any) => {
        const path = (args.path as string) || currentToml();
        if (path) {
          await showPlan(path);
        }
      }
    });
    commands.addCommand(CMD.run, {
      label: 'Run experiment',
      caption: 'Run the experiment file as a process of the Jupyter server (it survives a closed tab)',
      isEnabled: () => currentToml() !== null,
      execute: async (args: any) => {
        const path = (args.path as string) || currentToml();
        if (!path) {
          return;
        }
        const start = async (yes: boolean) => {
          const r = await post('runs', { file: path, yes });
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
              title: 'Start this run?',
              body: (error as Error).message,
              buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Run it' })]
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
    commands.addCommand(CMD.runs, { label: 'Show FAB-Bench runs', execute: () => shell.activateById(runs.id) });
    commands.addCommand(CMD.open, {
      label: 'Open FAB-Bench results',
      execute: (args: any) => (args.path ? openRun(args.path as string) : shell.activateById(runs.id))
    });
    commands.addCommand(CMD.rate, {
      label: 'Rate QA pairs',
      caption: 'The rating app (Voilà) in a tab: rate QA pairs with the keyboard; ratings are saved as you go',
      icon: ICON,
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
        tab.title.label = 'Rate QA pairs';
        tab.title.icon = ICON;
        tab.title.closable = true;
        shell.add(tab, 'main');
      }
    });
    commands.addCommand(CMD.doctor, {
      label: 'Doctor',
      caption: 'What works on this machine (fabnb doctor)',
      icon: ICON,
      execute: async () => {
        const content = new Widget();
        content.addClass('fabnb-panel');
        content.addClass('fabnb-lab');
        content.node.append(el('div', 'checking...', 'fabnb-muted'));
        const tab = new MainAreaWidget({ content });
        tab.title.label = 'fabnb doctor';
        tab.title.icon = ICON;
        tab.title.closable = true;
        shell.add(tab, 'main');
        try {
          const rows = await api<any[]>('doctor');
          content.node.replaceChildren(el('h2', 'fabnb doctor'), table(rows, Object.keys(rows[0] || {})));
        } catch (error) {
          content.node.replaceChildren(el('div', String((error as Error).message), 'fabnb-error'));
        }
      }
    });

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
          label: 'Plan',
          tooltip: 'FAB-Bench: save, then the plan of this experiment (no call is made)',
          onClick: () => void context.save().then(() => commands.execute(CMD.plan, { path: context.path }))
        });
        const runButton = new ToolbarButton({
          label: 'Run',
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
