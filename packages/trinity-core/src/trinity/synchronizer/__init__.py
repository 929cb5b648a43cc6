"""Weight synchronisation between trainer and explorer."""
