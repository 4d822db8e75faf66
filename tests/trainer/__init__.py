"""Tests of the trainer package."""
