"""Engines: the model stack of the explorer and the training engines of the trainer.

One model, four layers, each using only the one below it:
``ModelWrapper`` (what a workflow sees: calls that return Experiences) -> ``EngineClient`` (the
explorer's handle on one engine: batches or streams requests, holds its ``chat_tokenizer``) ->
``RolloutEngine`` (samples and takes weights: transformers, vLLM, external) -> ``ChatTokenizer``
(tokenizer, chat template, prompt limit; every one from ``load_tokenizer``). Trainer side:
``TrainingEngine`` (torch reference, verl). docs/engines.md describes both.
"""
