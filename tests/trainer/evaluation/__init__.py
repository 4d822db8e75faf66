"""Tests of trainer.evaluation."""
