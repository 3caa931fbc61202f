"""Time `fabnb reproduce`, the claims check alone, and `import fabnb`. Prints its figures.

Usage: python benchmarks/bench_reproduce.py [--runs 3]
"""

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from common import add_smoke, apply_smoke  # benchmarks/common.py


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    add_smoke(parser)
    runs = apply_smoke(parser.parse_args(), runs=1).runs

    import os

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    code = "import time; t = time.perf_counter(); import fabnb; print(time.perf_counter() - t)"
    imports = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(1 if runs == 1 else 5)]
    print(f"import fabnb: median {1000 * statistics.median(imports):.1f} ms over 5 runs")

    from fabnb.analysis.claims import check_claims
    from fabnb.analysis.reproduction import reproduce

    claims = []
    for _ in range(runs):
        t = time.perf_counter()
        check_claims()
        claims.append(time.perf_counter() - t)
    print(f"check_claims: median {statistics.median(claims):.2f} s over {runs} runs")

    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            t = time.perf_counter()
            reproduce(out)
            times.append(time.perf_counter() - t)
    print(f"reproduce: median {statistics.median(times):.2f} s, min {min(times):.2f} s over {runs} runs")


if __name__ == "__main__":
    main()
