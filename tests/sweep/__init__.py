"""Tests of the sweep package."""
