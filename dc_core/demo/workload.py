"""A framework-free training loop in pure Python: a bag-of-words logistic
regression over generated text. It runs through the real session and
collector, with hand-marked operators (``session.region``), so the demo works without torch."""

from __future__ import annotations

import math
import random
from pathlib import Path

from dc_core.record.session import Session

VOCAB = [f"w{i}" for i in range(64)]


def make_batch(rng: random.Random, size: int = 32) -> list[tuple[list[str], int]]:
    batch = []
    for _ in range(size):
        label = rng.random() < 0.5
        words = [rng.choice(VOCAB[:40] if label else VOCAB[24:]) for _ in range(48)]
        batch.append((words, int(label)))
    return batch


def tokenize(words: list[str]) -> list[int]:
    return [int(w[1:]) for w in words]


def matvec(weights: list[float], features: list[list[float]]) -> list[float]:
    return [sum(w * x for w, x in zip(weights, row)) for row in features]


def forward(session: Session, weights: list[float], batch) -> tuple[list[list[float]], list[float]]:
    with session.region("demo::featurize"):
        features = []
        for words, _ in batch:
            row = [0.0] * len(VOCAB)
            for token in tokenize(words):
                row[token] += 1.0
            features.append(row)
    with session.region("demo::matvec"):
        logits = matvec(weights, features)
    with session.region("demo::sigmoid"):
        probs = [1.0 / (1.0 + math.exp(-z)) for z in logits]
    return features, probs


def backward(session: Session, features, probs, batch) -> list[float]:
    with session.region("demo::grad", backward=True):
        grad = [0.0] * len(VOCAB)
        for row, p, (_, y) in zip(features, probs, batch):
            for j, x in enumerate(row):
                grad[j] += (p - y) * x / len(batch)
    return grad


def train(logdir: str | Path, steps: int = 10, window: tuple[int, int] = (3, 4), run: str | None = None) -> list[Path]:
    """Train for ``steps`` steps profiling ``window`` = (start, count) into
    run ``run`` of ``logdir``; returns written files."""
    session = Session(logdir=str(logdir), run=run, steps={"start": window[0], "count": window[1]},
                      framework="python", default_phase="forward", cpu_sampling_hz=200, system_interval_ms=100)
    rng = random.Random(0)
    weights = [0.0] * len(VOCAB)
    for step in range(steps):
        session.step_begin(step)
        with session.phase("dataloader"):
            batch = make_batch(rng)
        features, probs = forward(session, weights, batch)
        with session.phase("backward"):
            grad = backward(session, features, probs, batch)
        with session.phase("optimizer"):
            weights = [w - 0.5 * g for w, g in zip(weights, grad)]
        session.step_end(step)
    session.close()
    return session.written
