"""Tests of sweep.run."""
