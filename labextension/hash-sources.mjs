// Records the SHA-256 of the extension's sources beside the built assets (fabnb/jupyter/labextension/
// sources.sha256): tests/test_jupyter.py recomputes it, so sources changed without a rebuild fail a fast test.
// The same digest as fabnb.jupyter.sources_hash: each file's path (from this folder, sorted), a NUL, its bytes, a NUL.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const files = ['package.json', 'tsconfig.json'];
for (const dir of ['schema', 'src', 'style']) {
  for (const name of readdirSync(dir)) {
    if (statSync(join(dir, name)).isFile()) {
      files.push(`${dir}/${name}`);
    }
  }
}
files.sort();
const hash = createHash('sha256');
for (const f of files) {
  hash.update(f + '\0');
  hash.update(readFileSync(f));
  hash.update('\0');
}
writeFileSync('../fabnb/jupyter/labextension/sources.sha256', hash.digest('hex') + '\n');
