"""Tests of sweep.records."""
