"""The trainer's side of the model: the torch reference training engine and the losses every
training engine computes (the verl engine of trinity-verl uses them too). docs/engines.md."""
