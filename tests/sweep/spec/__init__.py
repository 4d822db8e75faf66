"""Tests of sweep.spec."""
