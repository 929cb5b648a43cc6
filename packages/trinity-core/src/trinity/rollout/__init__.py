"""The explorer's side of the model: rollout engines, the client the explorer drives them
through, the ``ModelWrapper`` a workflow sees, and the OpenAI-compatible endpoint.

docs/engines.md describes them."""
