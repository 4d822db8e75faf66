"""Tests of sweep.commands."""
