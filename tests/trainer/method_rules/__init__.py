"""Tests of trainer.method_rules: the registry of methods."""
