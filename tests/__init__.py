"""The test suite: one folder per package (trainer/, sweep/, analysis/), e2e/ for the slow end-to-end tests,
and helpers.py for what several test modules use."""
