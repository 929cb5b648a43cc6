"""The explorer: workflows, model wrappers and the rollout loop."""
