"""What tests and ``trinity tiny-model`` use, shipped with the core: tiny local models (no
download) and crash points a test arms through the environment."""
