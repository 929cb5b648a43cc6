"""The trainer: the training loop over the buffer."""
