"""Progress of boosted-tree training for the scripts that train models (models/train_example.py,
models/train_reference.py): one bar per model, advancing once per boosting round where the
library can say so without leaving a trace in the model.

XGBoost and LightGBM report rounds through callbacks that they do not save; the classes here
adapt them to one tqdm bar that the caller opens (`rounds_bar`) and closes. The callbacks only
count: they never stop training or touch the model, so the saved models are byte for byte the
same. CatBoost writes any `callbacks=` (as "PythonUserDefinedPerObject") and any logging level
into the saved model's parameters, so its models get a bar of one step (`model_bar`) instead.
"""

from __future__ import annotations

from tqdm import tqdm
from xgboost.callback import TrainingCallback


def rounds_bar(desc: str, total: int) -> tqdm:
    """A bar on stderr over `total` boosting rounds. disable=None shows it on a terminal only,
    so CI logs and redirected output keep just the scripts' own lines; leave=False because the
    scripts print their own summary when done."""
    return tqdm(total=total, desc=desc, unit="round", disable=None, leave=False)


def model_bar(desc: str) -> tqdm:
    """A bar of one step for a model trained without round-by-round progress (CatBoost): it says
    what is being trained."""
    return tqdm(total=1, desc=desc, unit="model", disable=None, leave=False)


class XGBoostRounds(TrainingCallback):
    """For `xgboost.train(callbacks=...)` and the sklearn wrappers' `callbacks=`."""

    def __init__(self, bar: tqdm) -> None:
        super().__init__()
        self.bar = bar

    def after_iteration(self, model, epoch: int, evals_log) -> bool:
        self.bar.update()
        return False  # False: go on training


class LightGBMRounds:
    """For `lightgbm.train(callbacks=...)` and `LGBM*.fit(callbacks=...)`: LightGBM calls it after
    every iteration."""

    def __init__(self, bar: tqdm) -> None:
        self.bar = bar

    def __call__(self, env) -> None:
        self.bar.update()
