"""Tests of the analysis package."""
