"""Tests of trainer.losses."""
