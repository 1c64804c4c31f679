"""Hydra sweeper plugin that tunes DataLoader settings with Optuna (>= 4) studies."""
