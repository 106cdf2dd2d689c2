"""inferlane's engine: config, lanes, batcher, executor, models, service, CLI."""
