"""Hydra search-path plugin: loadertune's exported configs (``outputs/conf``)."""
