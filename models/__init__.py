"""The example and reference models' training scripts (`python -m models.train_example`, …) and
the feature-log loader (`python -m models.feature_log`)."""
