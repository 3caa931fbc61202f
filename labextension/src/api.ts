// The one way the panels talk to fabnb's server extension (/fabnb/api/...): Jupyter's own request,
// with its authentication and XSRF token. Every answer is decided by the Python side.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { nullTranslator, TranslationBundle } from '@jupyterlab/translation';

/** The FAB-Bench settings (the Settings Editor's "FAB-Bench", schema/plugin.json), read by every panel; the
 * plugin keeps them current. */
export const SETTINGS = { runsFolder: 'fabnb-runs', pollSeconds: 2, pageRows: 100, confirmUsd: null as number | null };

/** The translator's bundle for fabnb's words (the plugin sets it from JupyterLab's translator at activation). */
let bundle: TranslationBundle = nullTranslator.load('fabnb');
export function setTranslator(b: TranslationBundle): void {
  bundle = b;
}
/** A string a user reads, through JupyterLab's translator (``%1``... are filled from ``args``). */
export function __(text: string, ...args: any[]): string {
  return bundle.__(text, ...args);
}

/** The states of a run that is going (the runs sidebar, the status bar, a live viewer). */
export const LIVE = ['starting', 'running', 'stopping', 'ending'];

export async function api<T = any>(endpoint: string, init: RequestInit = {}, query: Record<string, string> = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const qs = Object.keys(query).length ? '?' + new URLSearchParams(query).toString() : '';
  const url = URLExt.join(settings.baseUrl, 'fabnb', 'api', endpoint) + qs;
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new Error(`fabnb's server extension did not answer (${error}); is fabnb installed in JupyterLab's environment?`);
  }
  const text = await response.text();
  let data: any = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    throw new Error(`fabnb's server extension answered ${response.status} with no JSON; check JupyterLab's log.`);
  }
  if (!response.ok) {
    // The answer's other fields go with the error (confirm: the run waits for the user's yes).
    throw Object.assign(new Error(data.error || data.message || `fabnb's server extension answered ${response.status}.`),
      { status: response.status, data });
  }
  return data as T;
}

export function post<T = any>(endpoint: string, body: any): Promise<T> {
  return api<T>(endpoint, { method: 'POST', body: JSON.stringify(body) });
}

/** A DOM element with text (never HTML: questions and answers may hold markup) and a class. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, text = '', cls = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (text) {
    node.textContent = text;
  }
  if (cls) {
    node.className = cls;
  }
  return node;
}

/** A table of records (text only), with the given columns. */
export function table(rows: any[], columns: string[], onClick?: (row: any) => void): HTMLTableElement {
  const t = el('table', '', 'fabnb-table');
  const head = t.createTHead().insertRow();
  for (const c of columns) {
    head.appendChild(el('th', c));
  }
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const c of columns) {
      const v = row[c];
      tr.insertCell().textContent = v === null || v === undefined ? '' : typeof v === 'number' ? fmt(v) : String(v);
    }
    if (onClick) {
      tr.classList.add('fabnb-clickable');
      tr.tabIndex = 0;
      tr.onclick = () => onClick(row);
      tr.onkeydown = (e: KeyboardEvent) => {
        if (e.key === 'Enter') {
          onClick(row);
        }
      };
    }
  }
  return t;
}

export function fmt(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(3);
}

export function seconds(s: number | null | undefined): string {
  if (s === null || s === undefined) {
    return '';
  }
  if (s < 90) {
    return `${Math.round(s)} s`;
  }
  if (s < 5400) {
    return `${Math.round(s / 60)} min`;
  }
  return `${(s / 3600).toFixed(1)} h`;
}
