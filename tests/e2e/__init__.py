"""End-to-end tests (slow): `sweep run` drivers, Ray clusters, Slurm, PostgreSQL, trackers."""
