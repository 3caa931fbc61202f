"""Plant a wheel in pip's cache exactly where pip looks for a build of an sdist (the check of .ci/run).

A machine that once built llama-cpp-python natively keeps that wheel in pip's cache, keyed by the
sdist's URL and hash, not by CMAKE_ARGS: a later install would take the native build. Building one
natively to prove the README's install ignores it costs 8 minutes; a planted wheel, at the very path
pip's own cache code gives for the sdist the README's install resolves, proves the same in seconds.
The planted wheel's package raises on import, so a README install that took it fails every test.

Usage: python .ci/plant_cached_wheel.py REPORT CACHE_DIR
    REPORT: ``pip install --dry-run --report`` of the requirement; CACHE_DIR: an absolute PIP_CACHE_DIR.
Prints the planted wheel's path.
"""

import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path

from pip._internal.cache import SimpleWheelCache
from pip._internal.models.link import Link
from pip._vendor.packaging.tags import sys_tags

report, cache_dir = sys.argv[1], sys.argv[2]
item = json.loads(Path(report).read_text())["install"][0]
info, name, version = item["download_info"], item["metadata"]["name"], item["metadata"]["version"]
link = Link(info["url"], hashes=info["archive_info"]["hashes"])
folder = Path(SimpleWheelCache(cache_dir).get_path_for_link(link))
folder.mkdir(parents=True, exist_ok=True)
tag = next(iter(sys_tags()))  # the most specific tag this interpreter takes: pip prefers it
project = name.replace("-", "_")
dist = f"{project}-{version}.dist-info"
package = "llama_cpp" if project == "llama_cpp_python" else project
files = {
    f"{package}/__init__.py": b'raise ImportError("the wheel .ci/run planted in pip\'s cache was installed")\n',
    f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
    f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: fabnb-ci\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
}


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


wheel = folder / f"{project}-{version}-{tag.interpreter}-{tag.abi}-{tag.platform}.whl"
with zipfile.ZipFile(wheel, "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
    record = "".join(f"{p},{digest(d)},{len(d)}\n" for p, d in files.items()) + f"{dist}/RECORD,,\n"
    z.writestr(f"{dist}/RECORD", record)
print(wheel)
