"""Shared fixtures: small hand-made score frames with known answers."""

import os

# Third-party opt-outs before anything imports deepeval (telemetry, .env loading).
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fabnb.schema import METRICS

ROOT = Path(__file__).resolve().parents[1]


def long_frame(curves: dict, metric: str = "average") -> pd.DataFrame:
    """{model: {context_k: score}} -> a score frame of one metric."""
    rows = [{"model": m, "context_k": float(k), "metric": metric, "score": float(v)}
            for m, c in curves.items() for k, v in c.items()]
    return pd.DataFrame(rows)


def six_metric_frame(models=("a", "b"), contexts=(4, 8, 16, 32), seed=0) -> pd.DataFrame:
    """All six metrics for each model and context, random but reproducible."""
    rng = np.random.default_rng(seed)
    rows = [{"system": "S", "model": m, "context_k": float(k), "output_k": 1.0, "metric": metric,
             "score": float(rng.uniform(0.3, 0.9))}
            for m in models for k in contexts for metric in METRICS]
    return pd.DataFrame(rows)


@pytest.fixture
def six():
    return six_metric_frame()
