"""The orchestrator: study specs, Ray Tune launch, the live Optuna mirror, the results store, the CLI."""
