#!/usr/bin/python3
"""Compares kiln/metrics.hpp with scikit-learn (Debian's python3-sklearn).

Feeds the kiln_reference_metrics binary (argv[1]) random scores and labels
(7 classes, one class never a label and one never predicted, so the
zero-division rules are exercised) and random regression predictions and
targets (3 outputs, targets far from zero), then checks accuracy, top-k for
every k, the confusion matrix, per-class and macro precision/recall/F1, MSE,
MAE and R² against sklearn.metrics. Counts must be equal; ratios agree to
1e-12 relative.
"""
import json
import subprocess
import sys

import numpy as np
from sklearn import metrics

rng = np.random.default_rng(18)
C, N = 7, 500
scores = rng.normal(size=(N, C))
labels = rng.integers(0, C - 1, size=N)  # class 6 is never a label
scores[:, 5] -= 10.0  # class 5 is never predicted (and still a label)
O, M = 3, 400
targets = (1e4 + rng.normal(size=(M, O)) * [1.0, 5.0, 0.1]).astype(np.float32)
predictions = (targets + rng.normal(size=(M, O)) * [0.5, 1.0, 0.05]).astype(np.float32)

lines = [f"{C} {N}"] + [" ".join(repr(float(v)) for v in scores[i]) + f" {labels[i]}" for i in range(N)]
lines += [f"{O} {M}"] + [" ".join(repr(float(v)) for v in np.concatenate([predictions[i], targets[i]]))
                         for i in range(M)]
out = subprocess.run([sys.argv[1]], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
kiln = json.loads(out.stdout)

predicted = scores.argmax(axis=1)
every = list(range(C))
failures = []


def close(name, got, want):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        failures.append(f"{name}: kiln {got.tolist()}, sklearn {want.tolist()}")


close("accuracy", kiln["accuracy"], metrics.accuracy_score(labels, predicted))
close("top_k", kiln["top_k"][1:-1],  # top-1 is accuracy; top-C is 1
      [metrics.top_k_accuracy_score(labels, scores, k=k, labels=every) for k in range(2, C)])
if kiln["confusion"] != metrics.confusion_matrix(labels, predicted, labels=every).ravel().tolist():
    failures.append("confusion matrix differs")
p, r, f, _ = metrics.precision_recall_fscore_support(labels, predicted, labels=every, zero_division=0)
close("precision", kiln["precision"], p)
close("recall", kiln["recall"], r)
close("f1", kiln["f1"], f)
for name, fn in [("macro_precision", metrics.precision_score), ("macro_recall", metrics.recall_score),
                 ("macro_f1", metrics.f1_score)]:
    close(name, kiln[name], fn(labels, predicted, average="macro", zero_division=0))
t64, p64 = targets.astype(np.float64), predictions.astype(np.float64)
close("mse", kiln["mse"], metrics.mean_squared_error(t64, p64))
close("mae", kiln["mae"], metrics.mean_absolute_error(t64, p64))
close("r2", kiln["r2"], metrics.r2_score(t64, p64))
close("r2_each", kiln["r2_each"], metrics.r2_score(t64, p64, multioutput="raw_values"))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"kiln's metrics equal scikit-learn's ({N} predictions over {C} classes, {M} regression samples of {O})")
