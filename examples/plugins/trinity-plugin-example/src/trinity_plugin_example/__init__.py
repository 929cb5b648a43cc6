"""An example third-party trinity plugin: the text-reversal task."""
