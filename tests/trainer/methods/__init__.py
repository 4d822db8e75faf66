"""Tests of trainer.methods."""
