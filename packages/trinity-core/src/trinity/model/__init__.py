"""What both sides of the model share: the engine interfaces (``engines``), the chat tokenizer and
token budgets, model loading and log-probs (``torch_model``), LoRA, images, MoE routing.

One model, four layers on the explorer's side (``trinity.rollout``), each using only the one below:
``ModelWrapper`` (what a workflow sees) -> ``EngineClient`` (the explorer's handle on one engine)
-> ``RolloutEngine`` (transformers, vLLM, external) -> ``ChatTokenizer`` (every one from
``load_tokenizer``). On the trainer's side (``trinity.training``): ``TrainingEngine`` (torch
reference, verl). docs/engines.md describes both.
"""
